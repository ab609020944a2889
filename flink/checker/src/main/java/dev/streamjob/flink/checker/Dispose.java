package dev.streamjob.flink.checker;

import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.GlobalConfiguration;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.core.fs.Path;
import org.apache.flink.core.plugin.PluginUtils;

import java.util.ArrayList;
import java.util.List;

/**
 * Deletes savepoints without a running cluster: the Flink engine's dispose pod runs this in the
 * job's own image (its file system plugins and credentials), for savepoints beyond the history
 * policy and for spec.savepoints.disposeOnDelete. A savepoint in Flink's canonical format is
 * self-contained in its directory, so disposing it is deleting that directory.
 *
 * <pre>flink-check --dispose PATH...</pre>
 *
 * Prints one JSON line {"disposed":[…],"missing":[…]}; exit 0, or 1 with {"error":…}.
 */
public final class Dispose {
    private Dispose() {}

    public static void main(String[] argv) {
        List<String> disposed = new ArrayList<>();
        List<String> missing = new ArrayList<>();
        try {
            Configuration conf = GlobalConfiguration.loadConfiguration();
            FileSystem.initialize(conf, PluginUtils.createPluginManagerFromRootFolder(conf));
            for (String arg : argv) {
                Path path = new Path(arg);
                if ("_metadata".equals(path.getName())) {
                    path = path.getParent();
                }
                FileSystem fs = path.getFileSystem();
                if (!fs.exists(path)) {
                    missing.add(arg);
                } else if (fs.delete(path, true)) {
                    disposed.add(arg);
                } else {
                    throw new java.io.IOException("could not delete " + path);
                }
            }
        } catch (Throwable e) {
            System.out.println("{\"error\":" + Json.quote(e.toString()) + "}");
            System.exit(1);
            return;
        }
        System.out.println("{\"disposed\":" + list(disposed) + ",\"missing\":" + list(missing) + "}");
        System.exit(0);
    }

    private static String list(List<String> items) {
        StringBuilder out = new StringBuilder("[");
        for (int i = 0; i < items.size(); i++) {
            if (i > 0) {
                out.append(',');
            }
            out.append(Json.quote(items.get(i)));
        }
        return out.append(']').toString();
    }
}
