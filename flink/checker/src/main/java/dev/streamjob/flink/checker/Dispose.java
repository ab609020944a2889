package dev.streamjob.flink.checker;

import org.apache.flink.core.fs.FileStatus;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.core.fs.Path;

import java.io.IOException;
import java.net.URI;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * Deletes savepoints without a running cluster: the Flink engine's dispose pod runs this in the
 * job's own image (its file system plugins and credentials), for savepoints beyond the history
 * policy and for spec.savepoints.disposeOnDelete. A savepoint in Flink's canonical format is
 * self-contained in its directory, so disposing it is deleting that directory.
 *
 * <pre>flink-check --dispose --savepoints-dir DIR [--checkpoints-dir DIR] [--] PATH...</pre>
 *
 * <p>A recursive delete of a wrong path (a user's recovered-savepoint annotation, a corrupted
 * status) could take a whole bucket, so only a savepoint of this job is deleted, as our runtime's
 * dispose does: each PATH must lie strictly inside the job's savepoints (or checkpoints)
 * directory — compared after normalisation, with the same scheme and authority and no {@code ..}
 * leaving it — and hold a {@code _metadata} that this Flink reads (Flink's magic number, a format
 * version it knows, and its own loader). Anything else is refused and left untouched. Nothing at
 * PATH is "missing", so a disposal can be repeated.
 *
 * <p>Prints one JSON line {@code {"refused":[{"path","reason"}],"failed":[{"path","reason"}],
 * "disposed":[…],"missing":[…]}} (refusals first: the termination message the operator reports
 * keeps 4 KiB). Exit 0: every path disposed or missing; 3: a path was refused; 1: a path could
 * not be deleted, or the file systems could not be set up; 2: usage.
 */
public final class Dispose {
    private final List<Path> within = new ArrayList<>();
    private final List<String[]> refused = new ArrayList<>();
    private final List<String[]> failed = new ArrayList<>();
    private final List<String> disposed = new ArrayList<>();
    private final List<String> missing = new ArrayList<>();

    private Dispose() {}

    public static void main(String[] argv) {
        Dispose run = new Dispose();
        List<String> paths = new ArrayList<>();
        try {
            for (int i = 0; i < argv.length; i++) {
                String arg = argv[i];
                if (arg.equals("--savepoints-dir") || arg.equals("--checkpoints-dir")) {
                    if (++i >= argv.length) {
                        throw new IllegalArgumentException(arg + " needs a value");
                    }
                    run.within.add(directory(arg, argv[i]));
                } else if (arg.equals("--")) {
                    paths.addAll(List.of(argv).subList(i + 1, argv.length));
                    break;
                } else if (arg.startsWith("--")) {
                    throw new IllegalArgumentException("unknown argument " + arg);
                } else {
                    paths.add(arg);
                }
            }
            if (run.within.isEmpty()) {
                throw new IllegalArgumentException("--savepoints-dir is required (only savepoints inside it are disposed)");
            }
        } catch (IllegalArgumentException e) {
            System.out.println(Json.error("usage: " + e.getMessage()));
            System.exit(2);
            return;
        }
        try {
            Storage.initializeFileSystems();
        } catch (Throwable e) {
            System.out.println(Json.error("cannot set up Flink's file systems: " + Check.describe(e)));
            System.exit(1);
            return;
        }
        for (String path : paths) {
            run.dispose(path);
        }
        System.out.println(run.toJson());
        System.exit(!run.refused.isEmpty() ? 3 : !run.failed.isEmpty() ? 1 : 0);
    }

    /** A directory savepoints may be disposed from: absolute, so that containment means one thing. */
    private static Path directory(String flag, String value) {
        Path dir = new Path(value);
        if (!dir.isAbsolute()) {
            throw new IllegalArgumentException(flag + " must be an absolute path, got " + value);
        }
        return dir;
    }

    private void dispose(String arg) {
        Path path;
        try {
            path = new Path(arg);
        } catch (IllegalArgumentException e) {
            refused.add(new String[] {arg, "not a path: " + e.getMessage()});
            return;
        }
        if (Storage.METADATA.equals(path.getName())) {
            path = path.getParent();
        }
        // Decided on the names alone, before any file system is asked about the path.
        String outside = outside(path);
        if (outside != null) {
            refused.add(new String[] {arg, outside});
            return;
        }
        String step = "look at it";
        try {
            FileSystem fs = path.getFileSystem();
            if (!fs.exists(path)) {
                missing.add(arg);
                return;
            }
            if (!fs.getFileStatus(path).isDir()) {
                refused.add(new String[] {arg, "not a savepoint: a file, not a savepoint's directory"});
                return;
            }
            Path metadata = new Path(path, Storage.METADATA);
            if (!fs.exists(metadata)) {
                FileStatus[] entries = fs.listStatus(path);
                if (entries == null || entries.length == 0) {
                    // What an interrupted disposal leaves once _metadata is gone (it goes last).
                    step = "remove its empty directory";
                    fs.delete(path, false);
                    missing.add(arg);
                } else {
                    refused.add(new String[] {arg, "not a savepoint: no _metadata in this directory"});
                }
                return;
            }
            String unreadable = Storage.unreadable(fs, metadata);
            if (unreadable != null) {
                refused.add(new String[] {arg, unreadable});
                return;
            }
            step = "delete it";
            delete(fs, path, metadata);
            disposed.add(arg);
        } catch (IOException | RuntimeException e) {
            failed.add(new String[] {arg, "could not " + step + ": " + Check.describe(e)});
        }
    }

    /**
     * Why {@code path} is not strictly inside one of the allowed directories, or null. Both are
     * normalised ({@code .} and {@code ..} resolved, scheme and authority made explicit with the
     * default file system's), so neither {@code dir/../elsewhere} nor another bucket passes, and
     * the directory itself is not a savepoint in it.
     */
    private String outside(Path path) {
        Location target = Location.of(path);
        if (target == null) {
            return "not an absolute path";
        }
        if (target.path.equals("/..") || target.path.startsWith("/../")) {
            return "its .. leaves the root of the file system";
        }
        List<String> dirs = new ArrayList<>();
        for (Path allowed : within) {
            Location dir = Location.of(allowed);
            if (dir.contains(target)) {
                return null;
            }
            if (dir.equals(target)) {
                return "not a savepoint: " + target + " is the job's directory itself, not a savepoint in it";
            }
            dirs.add(dir.toString());
        }
        return "not a savepoint of this job: " + target + " is not inside " + String.join(" or ", dirs);
    }

    /** A normalised absolute path: scheme (lower case), authority ("" for none) and path. */
    private record Location(String scheme, String authority, String path) {
        /** Null if {@code path} is relative (a working directory is no job's directory). */
        static Location of(Path path) {
            if (!path.isAbsolute()) {
                return null;
            }
            URI uri = path.toUri().normalize();
            URI fs = uri.getScheme() == null ? FileSystem.getDefaultFsUri() : uri;
            String authority = fs.getAuthority() == null ? "" : fs.getAuthority();
            return new Location(fs.getScheme().toLowerCase(Locale.ROOT), authority, uri.getPath());
        }

        /** Strictly below this directory, on the same file system. */
        boolean contains(Location other) {
            String dir = path.endsWith("/") ? path : path + "/";
            return scheme.equals(other.scheme) && authority.equals(other.authority)
                    && other.path.startsWith(dir) && other.path.length() > dir.length();
        }

        @Override
        public String toString() {
            return scheme + "://" + authority + path;
        }
    }

    /**
     * Deletes the savepoint's directory, {@code _metadata} last: an interrupted disposal leaves a
     * directory that is still recognisably a savepoint, so a retry finishes it instead of
     * refusing it.
     */
    private static void delete(FileSystem fs, Path dir, Path metadata) throws IOException {
        FileStatus[] entries = fs.listStatus(dir);
        for (FileStatus entry : entries == null ? new FileStatus[0] : entries) {
            if (!entry.getPath().getName().equals(Storage.METADATA) && !fs.delete(entry.getPath(), true)) {
                throw new IOException("could not delete " + entry.getPath());
            }
        }
        if (!fs.delete(metadata, false) || (fs.exists(dir) && !fs.delete(dir, true))) {
            throw new IOException("could not delete " + dir);
        }
    }

    private String toJson() {
        Json j = new Json().open();
        for (String list : new String[] {"refused", "failed"}) {
            j.key(list).openArray();
            for (String[] entry : list.equals("refused") ? refused : failed) {
                j.open().field("path", entry[0]).field("reason", entry[1]).close();
            }
            j.closeArray();
        }
        for (String list : new String[] {"disposed", "missing"}) {
            j.key(list).openArray();
            for (String path : list.equals("disposed") ? disposed : missing) {
                j.value(path);
            }
            j.closeArray();
        }
        return j.close().toString();
    }
}
