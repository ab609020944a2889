package dev.streamjob.flink.checker;

import org.apache.flink.api.dag.Pipeline;
import org.apache.flink.client.FlinkPipelineTranslationUtil;
import org.apache.flink.client.program.PackagedProgram;
import org.apache.flink.client.program.PackagedProgramUtils;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.core.fs.Path;
import org.apache.flink.runtime.OperatorIDPair;
import org.apache.flink.runtime.checkpoint.OperatorState;
import org.apache.flink.runtime.checkpoint.OperatorSubtaskState;
import org.apache.flink.runtime.checkpoint.metadata.CheckpointMetadata;
import org.apache.flink.runtime.jobgraph.JobGraph;
import org.apache.flink.runtime.jobgraph.JobVertex;
import org.apache.flink.runtime.jobgraph.OperatorID;
import org.apache.flink.runtime.util.EnvironmentInformation;
import org.apache.flink.state.api.runtime.SavepointLoader;
import org.apache.flink.streaming.api.graph.StreamGraph;
import org.apache.flink.streaming.api.graph.StreamGraphHasherV2;
import org.apache.flink.streaming.api.graph.StreamNode;

import dev.streamjob.flink.checker.state.Row;
import dev.streamjob.flink.checker.state.StateProbe;

import java.io.File;
import java.io.PrintStream;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;

/**
 * The savepoint pre-check: can the new job (its jar, entry class, arguments, parallelism and
 * configuration) restore this savepoint, on the Flink version this checker runs with?
 *
 * <p>It builds the new job's graph without running it (the user's main() runs against Flink's
 * capturing environment) and compares it with the savepoint's _metadata as Flink's own restore
 * does (Checkpoints.loadAndValidateCheckpoint): the format version must be readable, every
 * operator with state must map to an operator of the new graph (unless
 * --allow-non-restored-state), and an explicitly set max parallelism must be equal. It runs on
 * the target version's jars, so "can 1.20 read this 2.3 savepoint" is answered by 1.20's code.
 *
 * <p>When the structure fits, every operator's state is then restored as Flink's restore would
 * restore it and the new job's operators register their state against it ({@link StateProbe}):
 * a state whose type, kind or serializer Flink would refuse makes the verdict incompatible,
 * naming the operator's uid, the state and Flink's own reason.
 *
 * <p>The verdict is one JSON line on stdout (the last line; the user's main() may print before
 * it). Exit status: 0 compatible, 3 incompatible, 2 the check itself failed (unreadable jar or
 * savepoint, main() threw): the operator treats that as "not shown compatible".
 */
public final class Check {
    public static void main(String[] argv) {
        // The user's main() may print to stdout: keep it off the verdict line.
        PrintStream verdictOut = System.out;
        System.setOut(System.err);
        Args args;
        try {
            args = Args.parse(argv);
        } catch (IllegalArgumentException e) {
            verdictOut.println(Json.error("usage: " + e.getMessage()));
            System.exit(2);
            return;
        }
        Verdict verdict;
        try {
            verdict = checkNewestState(args);
        } catch (Throwable e) {
            verdictOut.println(Json.error(describe(e)));
            verdictOut.flush();
            // A checkpoint that retention removed meanwhile: planned again against the latest
            // state (exit 1); anything else is the new job's own problem (exit 2).
            System.exit(missingFile(e) ? 1 : 2);
            return;
        }
        verdictOut.println(verdict.toJson());
        verdictOut.flush();
        writeTerminationMessage(verdict.toCompactJson(4000));
        System.exit(verdict.compatible() ? 0 : 3);
    }

    /** The container's termination message, where the operator reads the verdict (the full
     * line may not fit its 4 KiB): $STREAMJOB_TERMINATION_MESSAGE_PATH or /dev/termination-log,
     * when writable. */
    static void writeTerminationMessage(String line) {
        String path = System.getenv().getOrDefault("STREAMJOB_TERMINATION_MESSAGE_PATH", "/dev/termination-log");
        try {
            java.nio.file.Files.write(java.nio.file.Paths.get(path),
                    (line + "\n").getBytes(java.nio.charset.StandardCharsets.UTF_8));
        } catch (Exception e) {
            // not in a container (a developer's shell): stdout has the verdict
        }
    }

    /**
     * {@link #check} against the state asked for; a checkpoint of the running job that Flink
     * subsumed and deleted meanwhile (a few checkpoint intervals after it completed: the
     * operator's status, and the check pod's start, lag behind) is replaced by the newest
     * complete checkpoint in its job's folder, up to 3 times. Checkpoints of one job hold state
     * of the same types, so the verdict holds for the one the upgrade restores.
     */
    static Verdict checkNewestState(Args args) throws Exception {
        String asked = args.savepoint;
        Storage.initializeFileSystems();
        for (int attempt = 1; ; attempt++) {
            String folder = Resume.jobFolderOf(args.savepoint);
            if (folder != null) {
                Path metadata = new Path(args.savepoint, Storage.METADATA);
                if (!metadata.getFileSystem().exists(metadata)) {
                    String newest = Resume.newestCheckpoint(new Path(folder));
                    if (newest != null && !newest.equals(args.savepoint)) {
                        System.err.println("flink-check: " + args.savepoint + " is gone (subsumed); checking the newest"
                                + " checkpoint of the same job, " + newest);
                        args.savepoint = newest;
                    }
                }
            }
            try {
                return check(args);
            } catch (Exception e) {
                if (folder == null || attempt >= 3 || !missingFile(e)) {
                    throw e;
                }
                System.err.println("flink-check: " + args.savepoint + " went away while it was read (asked for "
                        + asked + "): " + describe(e));
            }
        }
    }

    static boolean missingFile(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof java.io.FileNotFoundException || t instanceof java.nio.file.NoSuchFileException) {
                return true;
            }
        }
        return false;
    }

    static Verdict check(Args args) throws Exception {
        Verdict verdict = new Verdict(EnvironmentInformation.getVersion(), args.savepoint);
        // The job's savepoints may be on an object store its image reaches through a plugin.
        Storage.initializeFileSystems();

        // 1. The format version, read with the target version's own table of serializers.
        Path savepoint = new Path(args.savepoint);
        FileSystem fs = savepoint.getFileSystem();
        verdict.formatVersion = Storage.formatVersion(fs, Storage.metadataFile(fs, savepoint));
        if (!Storage.readable(verdict.formatVersion)) {
            verdict.problem(null, null, "format-version",
                    "savepoint format version " + verdict.formatVersion + " cannot be read by Flink "
                            + verdict.flinkVersion + " (savepoints restore forward only: it was written by a newer Flink)");
            return verdict;
        }

        // 2. The new job's graph, built without running it.
        Configuration conf = new Configuration();
        for (Map.Entry<String, String> e : args.conf.entrySet()) {
            conf.setString(e.getKey(), e.getValue());
        }
        PackagedProgram.Builder builder = PackagedProgram.newBuilder()
                .setJarFile(new File(args.jar))
                .setArguments(args.programArgs.toArray(new String[0]))
                .setConfiguration(conf);
        if (args.entryClass != null) {
            builder.setEntryPointClassName(args.entryClass);
        }
        PackagedProgram program = builder.build();
        Map<OperatorID, NewOperator> newOperators = new LinkedHashMap<>();
        Map<Integer, String> uidByNode = new LinkedHashMap<>();
        Set<Integer> sourceOrSinkNodes = new LinkedHashSet<>();
        JobGraph jobGraph;
        try {
            Pipeline pipeline = PackagedProgramUtils.getPipelineFromProgram(program, conf, args.parallelism, true);
            Map<Integer, String> nameByNode = new LinkedHashMap<>();
            Map<OperatorID, Integer> nodeById = new LinkedHashMap<>();
            if (pipeline instanceof StreamGraph) {
                StreamGraph streamGraph = (StreamGraph) pipeline;
                sourceOrSinkNodes.addAll(streamGraph.getSourceIDs());
                sourceOrSinkNodes.addAll(streamGraph.getSinkIDs());
                Map<Integer, byte[]> hashes = new StreamGraphHasherV2().traverseStreamGraphAndGenerateHashes(streamGraph);
                for (StreamNode node : streamGraph.getStreamNodes()) {
                    uidByNode.put(node.getId(), node.getTransformationUID());
                    nameByNode.put(node.getId(), node.getOperatorName());
                    byte[] hash = hashes.get(node.getId());
                    if (hash != null) {
                        nodeById.put(new OperatorID(hash), node.getId());
                    }
                }
            }
            jobGraph = FlinkPipelineTranslationUtil.getJobGraph(
                    program.getUserCodeClassLoader(), pipeline, conf, args.parallelism);
            for (JobVertex vertex : jobGraph.getVertices()) {
                for (OperatorIDPair pair : vertex.getOperatorIDs()) {
                    List<OperatorID> ids = new ArrayList<>();
                    ids.add(pair.getGeneratedOperatorID());
                    pair.getUserDefinedOperatorID().ifPresent(ids::add);
                    for (OperatorID id : ids) {
                        Integer node = nodeById.get(id);
                        newOperators.put(id, new NewOperator(
                                id,
                                node == null ? null : uidByNode.get(node),
                                node == null ? vertex.getName() : nameByNode.get(node),
                                vertex.getMaxParallelism()));
                    }
                }
            }
        } catch (Exception e) {
            program.close();
            throw e;
        }
        verdict.newOperators.addAll(newOperators.values());
        try {
            CheckpointMetadata metadata = SavepointLoader.loadSavepointMetadata(args.savepoint);
            checkSavepoint(args, verdict, metadata, newOperators, program.getUserCodeClassLoader());
            // 5. Only a savepoint whose structure fits is restored state by state.
            if (verdict.compatible()) {
                StateProbe probe = StateProbe.run(jobGraph, uidByNode, sourceOrSinkNodes, metadata, conf,
                        program.getUserCodeClassLoader(), false);
                verdict.stateRows.addAll(probe.rows);
                verdict.undecided.addAll(probe.undecided.keySet());
                for (Row row : probe.rows) {
                    if (row.verdict == Row.Verdict.INCOMPATIBLE) {
                        verdict.problem(null, row.uid, "state-incompatible", stateName(row) + ": " + row.reason
                                + "; Flink would fail restoring it after the old job is gone");
                    } else if (row.verdict == Row.Verdict.LEFT_BEHIND && !args.allowNonRestoredState
                            && !probe.undecided.containsKey(row.uid)) {
                        // Flink drops it without a word: refused like a removed operator's state
                        verdict.problem(null, row.uid, "state-left-behind", stateName(row)
                                + " is in the savepoint, but the new operator does not register it when it starts"
                                + " (renamed or removed; Flink would drop it silently); set allowNonRestoredState to drop it");
                    }
                }
            }
        } finally {
            program.close();
        }
        return verdict;
    }

    /** Step 3: the savepoint's operators against the new graph, as Flink's restore maps them. */
    static void checkSavepoint(Args args, Verdict verdict, CheckpointMetadata metadata,
            Map<OperatorID, NewOperator> newOperators, ClassLoader userClassLoader) throws Exception {
        for (OperatorState state : metadata.getOperatorStates()) {
            verdict.savepointOperators++;
            OperatorID id = state.getOperatorID();
            String uid = savedUid(state);
            NewOperator target = newOperators.get(id);
            if (target != null) {
                if (target.uid != null) {
                    uid = target.uid;
                }
                // A max parallelism the new job does not set is taken from the savepoint (Flink
                // rescales it); one it sets must be equal, or key groups would not line up.
                if (target.maxParallelism > 0 && target.maxParallelism != state.getMaxParallelism()) {
                    verdict.problem(id, uid, "max-parallelism",
                            "max parallelism changed from " + state.getMaxParallelism() + " to " + target.maxParallelism
                                    + " (key groups of the saved state would not line up)");
                }
                if (isSinkCommitter(target) && hasState(state) && writtenBy1x(verdict)) {
                    verdict.problem(id, uid, "sink-committer-across-majors",
                            "the savepoint was written by Flink 1.x and holds pending committables of this sink"
                                    + " committer; Flink " + verdict.flinkVersion + " fails restoring them (\"Trying to"
                                    + " commit incomplete batch of committables\", measured with Flink 1.20.0 -> 2.3.0"
                                    + " and FileSink), so the new job would fail after the old one is gone");
                }
                // 4. Its state names and serializer snapshots, read with the new job's classes.
                if (hasState(state)) {
                    StateCheck.Result states = StateCheck.read(state, userClassLoader);
                    verdict.states.add(new Object[] {id.toHexString(), uid, states.names});
                    for (String why : states.unresolvable) {
                        verdict.problem(id, uid, "state-serializer", why
                                + "; Flink would fail restoring it after the old job is gone");
                    }
                }
                continue;
            }
            if (!hasState(state)) {
                continue; // Flink skips empty state of a removed operator.
            }
            if (args.allowNonRestoredState) {
                verdict.notRestored.add(new String[] {id.toHexString(), uid});
            } else {
                verdict.problem(id, uid, "unmapped-state",
                        "the savepoint holds state of operator " + (uid != null ? "uid \"" + uid + "\" (id " + id + ")" : id)
                                + " that no operator of the new job restores (removed, or its uid changed); set"
                                + " allowNonRestoredState to drop that state");
            }
        }
    }

    /** {@code state "count" (VALUE)}, {@code the key}, or the probe's own label in parentheses. */
    static String stateName(Row row) {
        if ("(key)".equals(row.state)) {
            return "the key";
        }
        if ("(restore)".equals(row.state)) {
            return "restoring its saved state";
        }
        if (row.state.startsWith("(")) {
            return row.state.substring(1, row.state.length() - 1);
        }
        return "state \"" + row.state + "\" (" + row.kind + ")";
    }

    /** Sink V2's committer operator: Flink names its uid "Sink Committer: <sink uid>". */
    static boolean isSinkCommitter(NewOperator operator) {
        return (operator.uid != null && operator.uid.startsWith("Sink Committer: "))
                || (operator.name != null && operator.name.endsWith(": Committer"));
    }

    /** Formats 1-4 are Flink 1.x's (1.20 writes 4); the check runs on a 2.x target. */
    static boolean writtenBy1x(Verdict verdict) {
        return verdict.formatVersion <= 4 && !verdict.flinkVersion.startsWith("1.");
    }

    static boolean hasState(OperatorState state) {
        if (state.getCoordinatorState() != null) {
            return true;
        }
        for (OperatorSubtaskState subtask : state.getStates()) {
            if (subtask.hasState()) {
                return true;
            }
        }
        return false;
    }

    /** Flink 2.x writes the uid into the savepoint (format v6); 1.x only the operator id. */
    static String savedUid(OperatorState state) {
        try {
            Method m = OperatorState.class.getMethod("getOperatorUid");
            Object value = m.invoke(state);
            if (value instanceof Optional) {
                Optional<?> opt = (Optional<?>) value;
                return opt.isPresent() && !opt.get().toString().isEmpty() ? opt.get().toString() : null;
            }
        } catch (ReflectiveOperationException e) {
            // 1.x: no uid in the savepoint
        }
        return null;
    }

    static String describe(Throwable e) {
        StringBuilder out = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (out.length() > 0) {
                out.append(": ");
            }
            out.append(t.getClass().getSimpleName());
            if (t.getMessage() != null) {
                out.append(" ").append(t.getMessage());
            }
            if (t.getCause() == t) {
                break;
            }
        }
        return out.toString();
    }

    static final class NewOperator {
        final OperatorID id;
        final String uid;
        final String name;
        final int maxParallelism;

        NewOperator(OperatorID id, String uid, String name, int maxParallelism) {
            this.id = id;
            this.uid = uid;
            this.name = name;
            this.maxParallelism = maxParallelism;
        }
    }

    static final class Verdict {
        final String flinkVersion;
        final String savepoint;
        int formatVersion;
        int savepointOperators;
        final List<NewOperator> newOperators = new ArrayList<>();
        final List<String[]> problems = new ArrayList<>();
        final List<String[]> notRestored = new ArrayList<>();
        /** (operator id, uid, state names) of every restored operator with state. */
        final List<Object[]> states = new ArrayList<>();
        /** Every saved or registered state, with what Flink's restore would do with it. */
        final List<Row> stateRows = new ArrayList<>();
        /** Uids of operators the probe could not start: their states have no verdict. */
        final Set<String> undecided = new LinkedHashSet<>();

        Verdict(String flinkVersion, String savepoint) {
            this.flinkVersion = flinkVersion;
            this.savepoint = savepoint;
        }

        void problem(OperatorID id, String uid, String kind, String message) {
            problems.add(new String[] {id == null ? null : id.toHexString(), uid, kind, message});
        }

        boolean compatible() {
            return problems.isEmpty();
        }

        String toJson() {
            Json j = new Json().open();
            j.field("verdict", compatible() ? "compatible" : "incompatible");
            j.field("flinkVersion", flinkVersion);
            j.field("savepoint", savepoint);
            j.field("formatVersion", formatVersion);
            j.field("savepointOperators", savepointOperators);
            j.key("problems").openArray();
            for (String[] p : problems) {
                j.open().field("operatorId", p[0]).field("uid", p[1]).field("kind", p[2]).field("message", p[3]).close();
            }
            j.closeArray();
            j.key("notRestored").openArray();
            for (String[] p : notRestored) {
                j.open().field("operatorId", p[0]).field("uid", p[1]).close();
            }
            j.closeArray();
            j.key("states").openArray();
            for (Object[] st : states) {
                j.open().field("operatorId", (String) st[0]).field("uid", (String) st[1]).key("names").openArray();
                for (Object name : (List<?>) st[2]) {
                    j.value(name.toString());
                }
                j.closeArray().close();
            }
            j.closeArray();
            j.key("stateVerdicts").openArray();
            for (Row r : stateRows) {
                j.open().field("uid", r.uid).field("state", r.state).field("kind", r.kind)
                        .field("verdict", r.verdict.name()).field("reason", r.reason).close();
            }
            j.closeArray();
            j.key("operators").openArray();
            for (NewOperator o : newOperators) {
                j.open().field("operatorId", o.id.toHexString()).field("uid", o.uid).field("name", o.name)
                        .field("maxParallelism", o.maxParallelism).close();
            }
            j.closeArray();
            return j.close().toString();
        }

        /** The verdict within {@code limit} bytes (a termination message holds 4 KiB): verdict,
         * versions and as many problems as fit; the full line goes to the log. */
        String toCompactJson(int limit) {
            List<Row> dropped = new ArrayList<>();
            for (Row r : stateRows) {
                if (r.verdict == Row.Verdict.LEFT_BEHIND && !undecided.contains(r.uid)) {
                    dropped.add(r);
                }
            }
            int kept = problems.size();
            int keptOperators = notRestored.size();
            int keptStates = dropped.size();
            while (true) {
                Json j = new Json().open();
                j.field("verdict", compatible() ? "compatible" : "incompatible");
                j.field("flinkVersion", flinkVersion);
                j.field("formatVersion", formatVersion);
                j.key("problems").openArray();
                for (String[] p : problems.subList(0, kept)) {
                    String message = p[3].length() > 600 ? p[3].substring(0, 600) + "..." : p[3];
                    j.open().field("operatorId", p[0]).field("uid", p[1]).field("kind", p[2]).field("message", message).close();
                }
                j.closeArray();
                // what a compatible restore drops (allowNonRestoredState): the operator reports it
                j.key("notRestored").openArray();
                for (String[] p : notRestored.subList(0, keptOperators)) {
                    j.open().field("operatorId", p[0]).field("uid", p[1]).close();
                }
                j.closeArray();
                j.key("droppedStates").openArray();
                for (Row r : dropped.subList(0, keptStates)) {
                    j.open().field("uid", r.uid).field("state", r.state).field("kind", r.kind).close();
                }
                j.closeArray();
                int omitted = (problems.size() - kept) + (notRestored.size() - keptOperators) + (dropped.size() - keptStates);
                if (omitted > 0) {
                    j.field("omittedProblems", omitted);
                }
                String out = j.close().toString();
                if (out.getBytes(java.nio.charset.StandardCharsets.UTF_8).length <= limit
                        || kept + keptOperators + keptStates == 0) {
                    return out;
                }
                // the refusals are kept longest: what is dropped goes first
                if (keptStates > 0) {
                    keptStates--;
                } else if (keptOperators > 0) {
                    keptOperators--;
                } else {
                    kept--;
                }
            }
        }
    }
}
