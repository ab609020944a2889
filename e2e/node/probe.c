/* The e2e suite's network probe, alone in an image from scratch (e2e/scripts/build-images.sh):
 * a pod that tests exec into to check what the pod network, Services, DNS and NetworkPolicies let
 * through. Our other images have no shell or client on purpose.
 *
 *   probe serve                      answer every TCP connection on 0.0.0.0:8080 with one line,
 *                                    "streamjob-e2e-probe", until SIGTERM (the pod's main process)
 *   probe connect HOST PORT MILLIS   open a TCP connection; prints "open", "refused" or "timeout"
 *   probe resolve NAME               print NAME's IPv4 addresses through the pod's resolv.conf
 *
 * Exit status: 0 open / resolved, 1 refused / not found, 2 timeout, 3 usage or other error.
 * Static: a tiny resolver of its own (UDP to the first nameserver of /etc/resolv.conf, search
 * list and ndots as the kubelet writes them) so that no NSS module has to be loaded. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void stop(int sig) {
  (void)sig;
  _exit(0);
}

static int serve(void) {
  struct sigaction term = {.sa_handler = stop};
  sigaction(SIGINT, &term, NULL);
  sigaction(SIGTERM, &term, NULL);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(8080)};
  if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(fd, 16) < 0) {
    perror("probe: listen on 0.0.0.0:8080");
    return 3;
  }
  static const char line[] = "streamjob-e2e-probe\n";
  for (;;) {
    int c = accept(fd, NULL, NULL);
    if (c < 0) continue;
    if (write(c, line, sizeof line - 1) < 0) perror("probe: write");
    close(c);
  }
  return 0; /* not reached */
}

static int connect_to(const char *host, const char *port_s, const char *millis_s) {
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port_s))};
  if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
    fprintf(stderr, "probe: %s is not an IPv4 address\n", host);
    return 3;
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    perror("probe: socket");
    return 3;
  }
  if (connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0) {
    puts("open");
    return 0;
  }
  if (errno != EINPROGRESS) {
    printf("refused (%s)\n", strerror(errno));
    return 1;
  }
  struct pollfd p = {.fd = fd, .events = POLLOUT};
  int n = poll(&p, 1, atoi(millis_s));
  if (n == 0) {
    puts("timeout");
    return 2;
  }
  int err = 0;
  socklen_t len = sizeof err;
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err == 0) {
    puts("open");
    return 0;
  }
  printf("refused (%s)\n", strerror(err));
  return err == ETIMEDOUT ? 2 : 1;
}

/* ---- a minimal DNS client: A queries over UDP ---------------------------------------------- */

struct resolv {
  char nameserver[64];
  char search[8][256];
  int nsearch;
  int ndots;
};

static void read_resolv(struct resolv *r) {
  memset(r, 0, sizeof *r);
  r->ndots = 1;
  FILE *f = fopen("/etc/resolv.conf", "r");
  if (!f) return;
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    char *save = NULL, *word = strtok_r(line, " \t\n", &save);
    if (!word) continue;
    if (!strcmp(word, "nameserver") && !r->nameserver[0]) {
      char *v = strtok_r(NULL, " \t\n", &save);
      if (v) snprintf(r->nameserver, sizeof r->nameserver, "%s", v);
    } else if (!strcmp(word, "search")) {
      char *v;
      while ((v = strtok_r(NULL, " \t\n", &save)) && r->nsearch < 8)
        snprintf(r->search[r->nsearch++], 256, "%s", v);
    } else if (!strcmp(word, "options")) {
      char *v;
      while ((v = strtok_r(NULL, " \t\n", &save)))
        if (!strncmp(v, "ndots:", 6)) r->ndots = atoi(v + 6);
    }
  }
  fclose(f);
}

/* Sends one A query for `name`; prints the answers. 0 found, 1 NXDOMAIN/none, 2 timeout. */
static int query(const char *server, const char *name) {
  unsigned char q[512], a[1500];
  size_t n = 0;
  uint16_t id = (uint16_t)(getpid() ^ time(NULL));
  unsigned char head[12] = {id >> 8, id & 0xff, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
  memcpy(q, head, 12);
  n = 12;
  const char *label = name;
  while (*label) {
    const char *dot = strchr(label, '.');
    size_t len = dot ? (size_t)(dot - label) : strlen(label);
    if (len == 0 || len > 63 || n + len + 6 > sizeof q) return 3;
    q[n++] = (unsigned char)len;
    memcpy(q + n, label, len);
    n += len;
    label += len + (dot ? 1 : 0);
    if (!dot) break;
  }
  q[n++] = 0;
  q[n++] = 0, q[n++] = 1; /* A */
  q[n++] = 0, q[n++] = 1; /* IN */
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(53)};
  if (inet_pton(AF_INET, server, &addr.sin_addr) != 1) return 3;
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0 || sendto(fd, q, n, 0, (struct sockaddr *)&addr, sizeof addr) < 0) return 3;
  struct pollfd p = {.fd = fd, .events = POLLIN};
  if (poll(&p, 1, 3000) <= 0) {
    close(fd);
    return 2;
  }
  ssize_t got = recv(fd, a, sizeof a, 0);
  close(fd);
  if (got < 12 || a[0] != q[0] || a[1] != q[1]) return 3;
  int rcode = a[3] & 0x0f;
  int answers = (a[6] << 8) | a[7];
  if (rcode != 0 || answers == 0) return 1;
  size_t off = n; /* the answer section follows our question, echoed */
  int found = 0;
  for (int i = 0; i < answers && off + 12 <= (size_t)got; i++) {
    if (a[off] & 0xc0) off += 2; /* compressed name */
    else {
      while (off < (size_t)got && a[off]) off += a[off] + 1;
      off++;
    }
    if (off + 10 > (size_t)got) break;
    int type = (a[off] << 8) | a[off + 1];
    int rdlen = (a[off + 8] << 8) | a[off + 9];
    off += 10;
    if (type == 1 && rdlen == 4 && off + 4 <= (size_t)got) {
      printf("%u.%u.%u.%u\n", a[off], a[off + 1], a[off + 2], a[off + 3]);
      found = 1;
    }
    off += (size_t)rdlen;
  }
  return found ? 0 : 1;
}

static int resolve(const char *name) {
  struct resolv r;
  read_resolv(&r);
  if (!r.nameserver[0]) {
    fprintf(stderr, "probe: no nameserver in /etc/resolv.conf\n");
    return 3;
  }
  int dots = 0;
  for (const char *c = name; *c; c++) dots += *c == '.';
  char full[512];
  /* as glibc: names with fewer than ndots dots try the search list first */
  if (dots < r.ndots && name[strlen(name) - 1] != '.') {
    for (int i = 0; i < r.nsearch; i++) {
      snprintf(full, sizeof full, "%s.%s", name, r.search[i]);
      int rc = query(r.nameserver, full);
      if (rc != 1) {
        if (rc == 2) puts("timeout");
        return rc;
      }
    }
  }
  snprintf(full, sizeof full, "%s", name);
  size_t len = strlen(full);
  if (len && full[len - 1] == '.') full[len - 1] = 0;
  int rc = query(r.nameserver, full);
  if (rc == 1) puts("not found");
  if (rc == 2) puts("timeout");
  return rc;
}

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "serve")) return serve();
  if (argc == 5 && !strcmp(argv[1], "connect")) return connect_to(argv[2], argv[3], argv[4]);
  if (argc == 3 && !strcmp(argv[1], "resolve")) return resolve(argv[2]);
  fprintf(stderr, "usage: probe serve | connect HOST PORT MILLIS | resolve NAME\n");
  return 3;
}
