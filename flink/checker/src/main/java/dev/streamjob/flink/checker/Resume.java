package dev.streamjob.flink.checker;

import org.apache.flink.core.fs.FileStatus;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.core.fs.Path;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;

/**
 * Where a JobManager of a run starts its job from, decided when its pod starts: the newest
 * checkpoint of the run's job that Flink can restore, else the state the run was deployed from.
 *
 * <pre>flink-check --resume --checkpoints-dir DIR --job-id ID [--from PATH] --out FILE</pre>
 *
 * <p>Every run's job has a fixed id, so its checkpoints are {@code DIR/ID/chk-N}. A JobManager
 * pod that is lost and made again under the same run finds them here and resumes from the newest
 * one — what Flink's high-availability services would hand it — instead of the older checkpoint
 * the operator last copied into status: output committed since that one would be written again,
 * and retention may have deleted it. A new run deployed from a checkpoint of the run it replaces
 * (last-state) takes the newest checkpoint of that run the same way, for the same reason. A
 * {@code chk-N} without {@code _metadata} is a checkpoint still being written (or one being subsumed) and is passed over, as is one whose
 * {@code _metadata} Flink's own loader refuses; each is named on standard error, which goes to the
 * JobManager's log. A checkpoint with {@code _metadata} is complete: Flink writes it last, and a
 * sink's commits for it are notified only after it exists, so nothing committed is newer.
 *
 * <p>Writes the chosen path (empty: start without state) to FILE, since Flink's own logging may
 * print on standard output. Exit 0, or 1 when the checkpoints directory cannot be listed: then
 * the JobManager must not start from an older state, and its pod fails loudly; 2 usage.
 */
public final class Resume {
    private Resume() {}

    public static void main(String[] argv) {
        String dir = null;
        String jobId = null;
        String from = "";
        String out = null;
        try {
            for (int i = 0; i < argv.length; i++) {
                String arg = argv[i];
                if (i + 1 >= argv.length) {
                    throw new IllegalArgumentException(arg + " needs a value");
                }
                String value = argv[++i];
                switch (arg) {
                    case "--checkpoints-dir" -> dir = value;
                    case "--job-id" -> jobId = value;
                    case "--from" -> from = value;
                    case "--out" -> out = value;
                    default -> throw new IllegalArgumentException("unknown argument " + arg);
                }
            }
            if (dir == null || jobId == null || out == null) {
                throw new IllegalArgumentException("--checkpoints-dir, --job-id and --out are required");
            }
            if (!jobId.matches("[0-9a-f]{32}")) {
                throw new IllegalArgumentException("--job-id takes 32 hex digits, got " + jobId);
            }
        } catch (IllegalArgumentException e) {
            System.err.println("flink-check --resume: usage: " + e.getMessage());
            System.exit(2);
            return;
        }
        // last-state: a run deployed from a checkpoint of the run it replaces (null otherwise)
        String previousJob = previousRunCheckpoint(from, jobId);
        String chosen;
        try {
            Storage.initializeFileSystems();
            chosen = newestCheckpoint(new Path(dir, jobId));
        } catch (Throwable e) {
            System.err.println("flink-check --resume: cannot list the checkpoints under " + dir + "/" + jobId
                    + ": " + Check.describe(e));
            System.exit(1);
            return;
        }
        if (chosen != null) {
            System.err.println("flink-check --resume: resuming from the newest checkpoint of this run, " + chosen);
        } else if (previousJob != null) {
            // the run this one replaces may have completed checkpoints after the one the
            // operator recorded (status lags Flink by a poll); output they committed must not be
            // written again, so the newest of that run is taken
            try {
                chosen = newestCheckpoint(new Path(previousJob));
            } catch (Throwable e) {
                System.err.println("flink-check --resume: cannot list the checkpoints under " + previousJob
                        + ": " + Check.describe(e));
                System.exit(1);
                return;
            }
            if (chosen == null) {
                chosen = from;
            }
            System.err.println("flink-check --resume: no checkpoint of this run yet; continuing from the newest "
                    + "checkpoint of the run it replaces, " + chosen + " (recorded: " + from + ")");
        } else if (!from.isEmpty()) {
            chosen = from;
            System.err.println("flink-check --resume: no checkpoint of this run yet; starting from " + from);
        } else {
            chosen = "";
            System.err.println("flink-check --resume: no checkpoint of this run yet; starting without state");
        }
        try {
            Files.writeString(java.nio.file.Path.of(out), chosen, StandardCharsets.UTF_8);
        } catch (IOException e) {
            System.err.println("flink-check --resume: cannot write " + out + ": " + Check.describe(e));
            System.exit(1);
            return;
        }
        System.exit(0);
    }

    /**
     * The folder of the other job whose checkpoint {@code from} is ({@code DIR/ID/chk-N}), or
     * null when {@code from} is a savepoint or a checkpoint of this run's own job.
     */
    static String previousRunCheckpoint(String from, String jobId) {
        String folder = jobFolderOf(from);
        return folder == null || folder.endsWith("/" + jobId) ? null : folder;
    }

    /** The job folder {@code DIR/ID} of a checkpoint {@code DIR/ID/chk-N}, else null. */
    static String jobFolderOf(String checkpoint) {
        java.util.regex.Matcher m = java.util.regex.Pattern
                .compile("(.*/[0-9a-f]{32})/chk-[0-9]{1,18}/?")
                .matcher(checkpoint);
        return m.matches() ? m.group(1) : null;
    }

    /** The newest {@code chk-N} under {@code jobDir} that Flink restores, or null if none. */
    static String newestCheckpoint(Path jobDir) throws IOException {
        FileSystem fs = jobDir.getFileSystem();
        FileStatus[] entries;
        try {
            entries = fs.listStatus(jobDir);
        } catch (FileNotFoundException e) {
            return null;
        }
        if (entries == null) {
            return null;
        }
        List<FileStatus> checkpoints = new ArrayList<>();
        for (FileStatus entry : entries) {
            if (entry.isDir() && entry.getPath().getName().matches("chk-[0-9]{1,18}")) {
                checkpoints.add(entry);
            }
        }
        checkpoints.sort(Comparator.comparingLong(Resume::number).reversed());
        for (FileStatus entry : checkpoints) {
            Path checkpoint = entry.getPath();
            Path metadata = new Path(checkpoint, Storage.METADATA);
            if (!fs.exists(metadata)) {
                System.err.println("flink-check --resume: passing over " + checkpoint + ": no _metadata (not completed)");
                continue;
            }
            String unreadable = Storage.unreadable(fs, metadata);
            if (unreadable != null) {
                System.err.println("flink-check --resume: passing over " + checkpoint + ": " + unreadable);
                continue;
            }
            return checkpoint.toString();
        }
        return null;
    }

    /** N of a {@code chk-N} directory. */
    private static long number(FileStatus checkpoint) {
        return Long.parseLong(checkpoint.getPath().getName().substring("chk-".length()));
    }
}
