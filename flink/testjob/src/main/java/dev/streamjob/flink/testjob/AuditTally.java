package dev.streamjob.flink.testjob;

/**
 * The audit's state as a POJO (`--audit-type tally`): its serializer snapshot names this class.
 * flink/build.sh also packs the test job without it (`testjob-v2-usrlib/`, the image
 * `streamjob/flink-testjob-v2`): a next version of the job where the state class was deleted, whose
 * restore Flink would fail and the pre-check refuses.
 */
public class AuditTally {
    public long seen;

    public AuditTally() {}
}
