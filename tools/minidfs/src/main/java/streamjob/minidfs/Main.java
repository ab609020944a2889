package streamjob.minidfs;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CountDownLatch;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;

import sun.misc.Signal;

/**
 * Starts a single-namenode, single-datanode MiniDFSCluster bound to loopback only.
 *
 * <pre>
 * java -Xmx512m -jar minidfs.jar DATA_DIR [PORT] [key=value ...]
 * </pre>
 *
 * stdout carries exactly one line, {@code MINIDFS_READY hdfs://127.0.0.1:PORT}, once the
 * namenode answers RPC and a probe file was written through the datanode. All logging goes
 * to stderr. The process shuts the cluster down and exits on SIGTERM/SIGINT or when stdin
 * reaches EOF (set MINIDFS_NO_STDIN_WATCH=1 to disable the latter, e.g. for a shell
 * background job whose stdin is /dev/null).
 */
public final class Main {
  private static final String LOOPBACK = "127.0.0.1";
  private static final MiniDFSCluster[] HOLDER = new MiniDFSCluster[1];

  public static void main(String[] args) throws Exception {
    if (args.length < 1 || args[0].startsWith("-")) {
      System.err.println("usage: minidfs DATA_DIR [PORT|0] [hadoop.key=value ...]");
      System.exit(2);
    }
    // The cluster lives in DATA_DIR/dfs, which MiniDFSCluster wipes and formats on start;
    // anything else in DATA_DIR (e.g. a log file the caller redirects stderr to) is left alone.
    File baseDir = new File(new File(args[0]).getAbsoluteFile(), "dfs");
    int port = 0;
    int confStart = 1;
    if (args.length > 1 && !args[1].contains("=")) {
      port = Integer.parseInt(args[1]);
      confStart = 2;
    }
    if (!baseDir.isDirectory() && !baseDir.mkdirs()) {
      System.err.println("minidfs: cannot create data dir " + baseDir);
      System.exit(2);
    }

    Configuration conf = new HdfsConfiguration();
    // Loopback only, no DNS beyond localhost.
    conf.set("dfs.namenode.rpc-address", LOOPBACK + ":" + port);
    conf.set("dfs.namenode.http-address", LOOPBACK + ":0");
    conf.set("dfs.namenode.https-address", LOOPBACK + ":0");
    conf.set("dfs.http.policy", "HTTP_ONLY");
    conf.set("dfs.datanode.address", LOOPBACK + ":0");
    conf.set("dfs.datanode.http.address", LOOPBACK + ":0");
    conf.set("dfs.datanode.https.address", LOOPBACK + ":0");
    conf.set("dfs.datanode.ipc.address", LOOPBACK + ":0");
    conf.set("dfs.datanode.hostname", LOOPBACK);
    conf.setBoolean("dfs.client.use.datanode.hostname", false);
    conf.setBoolean("dfs.datanode.use.datanode.hostname", false);
    conf.setBoolean("dfs.namenode.datanode.registration.ip-hostname-check", false);
    // Semantics the tests want.
    conf.setBoolean("dfs.permissions.enabled", false);
    conf.setInt("dfs.replication", 1);
    conf.setInt("dfs.namenode.replication.min", 1);
    conf.setInt("dfs.namenode.safemode.extension", 0);
    conf.setBoolean("dfs.webhdfs.enabled", false);
    // Small footprint on a shared 2-core machine.
    conf.setInt("dfs.namenode.handler.count", 4);
    conf.setInt("dfs.namenode.service.handler.count", 2);
    conf.setInt("dfs.datanode.handler.count", 2);
    conf.setInt("dfs.heartbeat.interval", 1);
    conf.setBoolean("hadoop.metrics.enabled", false);
    for (int i = confStart; i < args.length; i++) {
      int eq = args[i].indexOf('=');
      if (eq <= 0) {
        System.err.println("minidfs: expected key=value, got " + args[i]);
        System.exit(2);
      }
      conf.set(args[i].substring(0, eq), args[i].substring(eq + 1));
    }

    // Orderly stop from a normal thread (not a JVM shutdown hook: Hadoop's own
    // ShutdownHookManager refuses hook removal once JVM shutdown is in progress, which
    // MiniDFSCluster.shutdown() does). Triggered by SIGTERM/SIGINT or stdin EOF.
    final CountDownLatch stop = new CountDownLatch(1);
    for (String sig : new String[] {"TERM", "INT", "HUP"}) {
      try {
        Signal.handle(new Signal(sig), s -> {
          System.err.println("minidfs: SIG" + s.getName() + ", stopping");
          stop.countDown();
        });
      } catch (IllegalArgumentException e) {
        System.err.println("minidfs: cannot handle SIG" + sig + ": " + e.getMessage());
      }
    }
    if (System.getenv("MINIDFS_NO_STDIN_WATCH") == null) {
      Thread watcher = new Thread(() -> {
        byte[] buf = new byte[256];
        try {
          InputStream in = System.in;
          while (in.read(buf) >= 0) {
            // discard; only EOF matters
          }
        } catch (IOException ignored) {
          // treat as closed
        }
        System.err.println("minidfs: stdin closed, stopping"
            + " (set MINIDFS_NO_STDIN_WATCH=1 to keep running without a stdin pipe)");
        stop.countDown();
      }, "minidfs-stdin-watch");
      watcher.setDaemon(true);
      watcher.start();
    }
    Thread stopper = new Thread(() -> {
      try {
        stop.await();
      } catch (InterruptedException e) {
        return;
      }
      // Watchdog: never leave a JVM behind because shutdown hangs.
      Thread halt = new Thread(() -> {
        try {
          Thread.sleep(20_000);
        } catch (InterruptedException e) {
          return;
        }
        System.err.println("minidfs: shutdown took >20s, halting");
        Runtime.getRuntime().halt(3);
      }, "minidfs-halt");
      halt.setDaemon(true);
      halt.start();
      MiniDFSCluster c;
      synchronized (HOLDER) {
        c = HOLDER[0];
      }
      if (c != null) {
        try {
          c.shutdown(); // keeps DATA_DIR on disk for post-mortem inspection
        } catch (Throwable t) {
          System.err.println("minidfs: shutdown error: " + t);
        }
      }
      if (c == null) {
        System.err.println("minidfs: stopped before the cluster was ready");
        Runtime.getRuntime().halt(1);
      }
      System.err.println("minidfs: stopped");
      System.exit(0);
    }, "minidfs-stopper");
    stopper.setDaemon(true);
    stopper.start();

    long t0 = System.nanoTime();
    MiniDFSCluster cluster;
    try {
      cluster = new MiniDFSCluster.Builder(conf, baseDir)
          .numDataNodes(1)
          .storagesPerDatanode(1)
          .nameNodePort(port)
          .nameNodeHttpPort(0)
          .format(true)
          .build();
    } catch (Throwable t) {
      System.err.println("minidfs: failed to start: " + t);
      t.printStackTrace();
      System.exit(1);
      return;
    }
    synchronized (HOLDER) {
      HOLDER[0] = cluster;
    }
    try {
      cluster.waitActive();
      // Probe: namenode RPC and the datanode write pipeline both work before we say READY.
      FileSystem fs = cluster.getFileSystem();
      Path probe = new Path("/.minidfs-probe");
      try (FSDataOutputStream out = fs.create(probe, true)) {
        out.write("ok".getBytes(StandardCharsets.UTF_8));
        out.hsync();
      }
      fs.delete(probe, false);
    } catch (Throwable t) {
      // Hadoop's non-daemon threads would keep the JVM alive: stop explicitly.
      System.err.println("minidfs: cluster started but is not usable: " + t);
      t.printStackTrace();
      try {
        cluster.shutdown();
      } finally {
        Runtime.getRuntime().halt(1);
      }
    }

    int nnPort = cluster.getNameNodePort();
    long ms = (System.nanoTime() - t0) / 1_000_000;
    String launch = System.getProperty("minidfs.launch.ms");
    String sinceLaunch = "";
    if (launch != null) {
      try {
        sinceLaunch = " (" + (System.currentTimeMillis() - Long.parseLong(launch))
            + " ms since minidfs.sh exec)";
      } catch (NumberFormatException ignored) {
        // cosmetic only
      }
    }
    System.err.println("minidfs: cluster up in " + ms + " ms" + sinceLaunch + "; namenode http "
        + cluster.getNameNode().getHttpAddress() + ", datanode xfer "
        + cluster.getDataNodes().get(0).getXferAddress() + ", data dir " + baseDir
        + ", pid " + ProcessHandle.current().pid());
    System.out.println("MINIDFS_READY hdfs://" + LOOPBACK + ":" + nnPort);
    System.out.flush();

    // Park forever; the stopper thread calls System.exit.
    new CountDownLatch(1).await();
  }
}
