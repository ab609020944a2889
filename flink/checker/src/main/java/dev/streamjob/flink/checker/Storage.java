package dev.streamjob.flink.checker;

import org.apache.flink.configuration.ConfigConstants;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.GlobalConfiguration;
import org.apache.flink.core.fs.FSDataInputStream;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.core.fs.Path;
import org.apache.flink.core.plugin.PluginUtils;
import org.apache.flink.runtime.checkpoint.Checkpoints;
import org.apache.flink.runtime.checkpoint.metadata.MetadataSerializers;
import org.apache.flink.runtime.util.EnvironmentInformation;

import java.io.DataInputStream;
import java.io.File;
import java.io.IOException;

/**
 * Flink's file systems and savepoint files as the job's own JobManager sees them, for the
 * pre-check and the disposal alike: both read savepoints the job wrote, wherever it wrote them.
 */
final class Storage {
    /** The first int of every checkpoint's and savepoint's {@code _metadata} (Flink's
     * {@code Checkpoints.HEADER_MAGIC_NUMBER}). */
    static final int MAGIC = 0x4960672d;
    static final String METADATA = "_metadata";

    private Storage() {}

    /**
     * Initialises Flink's file systems the way its processes do: with the plugins folder
     * ($FLINK_PLUGINS_DIR, else ./plugins), because object stores (s3://, gs://, abfss://) come
     * only from plugins — without them such a savepoint fails with
     * UnsupportedFileSystemSchemeException — and with the job's configuration, because the store's
     * endpoint and credentials settings are there.
     */
    static void initializeFileSystems() throws IOException {
        Configuration conf = configuration();
        FileSystem.initialize(conf, PluginUtils.createPluginManagerFromRootFolder(conf));
    }

    /**
     * The configuration in $FLINK_CONF_DIR, as Flink's processes load it. An empty configuration
     * when the variable is unset or the folder holds no configuration file: a dispose pod's
     * ConfigMap is optional (the version may be retired), and Flink's loader throws for an empty
     * folder rather than falling back.
     */
    static Configuration configuration() {
        String dir = System.getenv(ConfigConstants.ENV_FLINK_CONF_DIR);
        if (dir == null
                || !(new File(dir, "config.yaml").isFile() || new File(dir, "flink-conf.yaml").isFile())) {
            return new Configuration();
        }
        return GlobalConfiguration.loadConfiguration(dir);
    }

    /** A savepoint's {@code _metadata} file, the savepoint given as its directory or that file. */
    static Path metadataFile(FileSystem fs, Path savepoint) throws IOException {
        return fs.getFileStatus(savepoint).isDir() ? new Path(savepoint, METADATA) : savepoint;
    }

    /**
     * The format version in {@code metadata}'s header.
     *
     * @throws NotMetadata if the file does not start with Flink's magic number
     */
    static int formatVersion(FileSystem fs, Path metadata) throws IOException {
        try (FSDataInputStream in = fs.open(metadata); DataInputStream data = new DataInputStream(in)) {
            int magic = data.readInt();
            if (magic != MAGIC) {
                throw new NotMetadata(metadata + " is not a savepoint's _metadata (magic "
                        + Integer.toHexString(magic) + ", expected " + Integer.toHexString(MAGIC) + ")");
            }
            return data.readInt();
        }
    }

    /** Whether the running Flink has a serializer for this {@code _metadata} format version
     * (a version written by a newer Flink is unknown to an older one). */
    static boolean readable(int formatVersion) {
        try {
            MetadataSerializers.getSerializer(formatVersion);
            return true;
        } catch (IllegalArgumentException e) {
            return false;
        }
    }

    /**
     * Why {@code metadata} is not a checkpoint's or savepoint's this Flink reads (Flink's magic
     * number, a format version it knows, and its own loader, as a restore reads it), or null.
     */
    static String unreadable(FileSystem fs, Path metadata) {
        String flink = EnvironmentInformation.getVersion();
        try {
            int version = formatVersion(fs, metadata);
            if (!readable(version)) {
                return "not a savepoint Flink " + flink + " reads: _metadata format version " + version
                        + " is unknown to it (written by a newer Flink?)";
            }
            try (FSDataInputStream in = fs.open(metadata)) {
                Checkpoints.loadCheckpointMetadata(new DataInputStream(in), Storage.class.getClassLoader(),
                        metadata.getParent().toString());
            }
            return null;
        } catch (NotMetadata e) {
            return "not a savepoint: " + e.getMessage();
        } catch (Exception e) {
            return "not a savepoint Flink " + flink + " reads: its _metadata cannot be loaded (" + Check.describe(e) + ")";
        }
    }

    /** A file that is not Flink's checkpoint metadata. */
    static final class NotMetadata extends IOException {
        NotMetadata(String message) {
            super(message);
        }
    }
}
