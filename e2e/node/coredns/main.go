// CoreDNS for the e2e node: the upstream coredns main with only the plugins a cluster DNS needs,
// so the build compiles a fraction of CoreDNS's dependencies (no cloud DNS back ends, no tracing).
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	// The plugins, one import each; dnsserver.Directives below gives their chain order.
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
)

// directives is the execution order of a request through the plugins: the imported ones, in
// the order of CoreDNS's plugin.cfg (core/dnsserver/zdirectives.go). A Corefile naming any
// other directive is refused at startup ("unknown directive") instead of silently ignored.
var directives = []string{
	"bind",
	"ready",
	"health",
	"errors",
	"log",
	"cache",
	"kubernetes",
	"loop",
	"forward",
}

func init() {
	// Runs after the imported packages' init (coremain registers the dns server type with a
	// closure over dnsserver.Directives) and before coremain.Run parses the Corefile.
	if err := dnsserver.SetDirectives(directives); err != nil {
		panic(err)
	}
}

func main() {
	coremain.Run()
}
