package dev.streamjob.flink.testplugin;

import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.core.fs.FileSystemFactory;
import org.apache.flink.core.fs.local.LocalFileSystem;

import java.net.URI;

/**
 * The local file system under a scheme of its own, {@code streamjob-plugin://}, available only as a
 * Flink plugin (flink/build.sh puts it in the version folder's plugins/, never in lib/): the
 * tests' stand-in for an object store plugin such as flink-s3-fs-hadoop. A savepoint read
 * through this scheme shows that the checker loads Flink's plugins folder; without it Flink
 * answers UnsupportedFileSystemSchemeException, as it does for s3:// without the S3 plugin.
 */
public final class PluginOnlyFileSystemFactory implements FileSystemFactory {
    public static final String SCHEME = "streamjob-plugin";

    @Override
    public String getScheme() {
        return SCHEME;
    }

    @Override
    public FileSystem create(URI fsUri) {
        // The local file system resolves a path's file from its path part, whatever its scheme.
        return LocalFileSystem.getSharedInstance();
    }
}
