// Starts a MiniDFSCluster for the file sink's HDFS test: java MiniDfs BASEDIR
// Prints "READY hdfs://127.0.0.1:PORT" once the cluster is up; stops when stdin closes.
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.MiniDFSCluster;

public class MiniDfs {
    public static void main(String[] args) throws Exception {
        Configuration conf = new Configuration();
        conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, args[0]);
        conf.set("dfs.permissions.enabled", "false");
        conf.set("dfs.namenode.rpc-address", "127.0.0.1:0");
        conf.setInt("dfs.replication", 1);
        MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf).numDataNodes(1).build();
        cluster.waitActive();
        System.out.println("READY hdfs://127.0.0.1:" + cluster.getNameNodePort());
        System.out.flush();
        while (System.in.read() != -1) { }
        cluster.shutdown();
    }
}
