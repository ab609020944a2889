//! # streamjob-filesink: the exactly-once file sink
//!
//! Flink's StreamingFileSink rules (buckets, part files in-progress → pending → finished, rolling
//! policies, row and bulk formats, commit on checkpoint completion), made exactly-once on object
//! stores. Engine-agnostic: the runtime wraps one [`FileSink`] per sink subtask in its operator.
//!
//! ## Contract for the runtime
//!
//! ```text
//! let store = store::open_store(&spec.path, job.storage.as_ref())?;     // once per process is fine
//! let mut sink = FileSink::new(&spec, store, subtask, parallelism, schema,
//!                              FileSinkOptions { event_time_column, ..Default::default() })?;
//! // restore: hand every subtask the states of *all* old subtasks (empty on a fresh start);
//! // the sink takes its share and the counter floor itself:
//! sink.initialize_union(all_old_states).await?;   // commits restored pending files, resumes parts
//! // (or, with states already split: sink.initialize(mine, max_next_counter(&all)).await?)
//! loop {
//!     batch      => sink.write(&batch, now_ms, current_watermark).await?,
//!     timer      => sink.on_processing_time(now_ms).await?,  // every bucket_check_interval() or more often
//!     watermark  => sink.on_watermark(wm).await?,            // optional: _SUCCESS markers
//!     barrier(n) => state = sink.snapshot(n).await?,          // serialise with serde; error = decline checkpoint
//!     complete(n)=> if let Err(e) = sink.notify_checkpoint_complete(n).await { log; keep going }
//!     end of a bounded input => sink.end_of_input().await?, then one more checkpoint (snapshot+notify)
//! }
//! ```
//!
//! - Every state passed to `initialize` must come from the *latest completed* checkpoint, and each
//!   old subtask's state must be handed to exactly one new subtask ([`redistribute`] does that).
//!   `counter_floor` must be the max over *all* old subtasks ([`max_next_counter`]), otherwise a
//!   part name could repeat after a rescale.
//! - Errors from `write`, `snapshot`, `on_processing_time`, `on_watermark`, `end_of_input` and
//!   `initialize` mean the subtask must fail and the job restore from the latest completed
//!   checkpoint (no data is lost: the input is replayed from that checkpoint's position).
//!   `notify_checkpoint_complete` errors are not fatal: uncommitted files stay pending, appear in
//!   later snapshots and are committed by the next notification or by a restore. A store outage
//!   thus stalls checkpoints (snapshots fail) and delays visibility, never loses or duplicates.
//! - Times are epoch milliseconds. Checkpoint ids must increase.
//! - Records reach finished files only through `notify_checkpoint_complete` (or a restore); readers
//!   never see in-progress or pending data under a finished name: on S3 an in-progress part is an
//!   uncompleted multipart upload at the final key; on a local disk it is the hidden file
//!   `.{name}.inprogress.{uuid}` renamed on commit.
//! - Part names: `{partPrefix}-{subtask}-{counter}{partSuffix}` (suffix defaults to the format's
//!   extension: `.json`, `.csv.gz`, `.parquet`, ...), counters strictly increasing per subtask.
//! - Row formats persist an in-progress part at a checkpoint (compressed ones end their gzip
//!   member / zstd frame, so files are multi-member streams); Parquet rolls at every checkpoint.
//! - Recommit is idempotent: a commit whose store call fails counts as done exactly when the
//!   final object exists with the expected size (HEAD), never judged by error code.
//!
//! - Orphaned multipart uploads (started by an attempt that crashed before its checkpoint
//!   completed): each upload is recorded in a marker `{base}/.streamjob/uploads/{subtask}/{instance}-{n}`
//!   before its first part; markers are dropped on commit and by whoever takes an upload over on
//!   restore. After its first completed checkpoint, each subtask aborts the uploads of markers of
//!   dead instances with its index (subtask 0 also those with an index ≥ parallelism). An upload
//!   whose creation answer was lost, or that was killed between creation and its marker, is not
//!   recorded; on restore each subtask therefore also lists the open uploads under the base path
//!   (S3 ListMultipartUploads, SigV4-signed: object_store has no API for it; needs
//!   `s3:ListBucketMultipartUploads`) and aborts those named `{partPrefix}-{i}-{counter}...` with
//!   `i` its index (subtask 0: also `i` ≥ parallelism) and `counter` ≥ the restored counter
//!   floor: started after the restored checkpoint, referenced by no state, and not yet reused by
//!   this instance. Best effort (logged). What neither catches — an upload whose creation answer
//!   was lost while the instance lived on past a later checkpoint — is left to the bucket's
//!   `AbortIncompleteMultipartUpload` lifecycle rule: configure it as well.
//!   The `.streamjob/` directory is hidden from Hive/Spark readers (leading dot).
//!
//! - Compaction (`fileSink.compaction.targetSize`): at a snapshot, the pending files a bucket rolled
//!   since the previous checkpoint that are smaller than the target are merged into one pending
//!   file before they enter the state (row formats concatenated, CSV headers deduplicated, Parquet
//!   re-encoded); nothing visible is ever rewritten, so exactly-once holds. Only readable pending
//!   files are merged: temporary files (local), not multipart uploads (S3).
//!
//! - HDFS (`hdfs://namenode:port/path`, or `hdfs:///path` with `storage.hdfs.nameNode`) needs the
//!   cargo feature `hdfs` (hdfs-native, pure Rust; the runtime enables it by default): temporary
//!   file hsynced at checkpoints, closed
//!   and renamed on commit; on restore the crashed writer's lease is recovered and bytes after the
//!   checkpointed length are dropped by rewriting the file (no truncate).
//!
//! Not implemented yet: compaction on multipart stores and across checkpoints, cleanup of hidden
//! temporary files of crashed attempts on local file systems and HDFS (invisible to readers, but
//! they take space).

pub mod bucket;
pub mod error;
pub mod format;
#[cfg(test)]
mod fuzz;
#[cfg(test)]
#[path = "../../crds/src/fuzz_loop.rs"]
mod fuzz_loop;
pub mod part;
pub mod rolling;
pub mod sink;

pub use error::{Error, Result};
pub use sink::{
    FileSink, FileSinkOptions, InProgressFile, PendingFile, SinkMetrics, SinkSubtaskState,
    max_next_counter, redistribute,
};
pub use streamjob_storage::{Store, open_store};
/// The storage layer the sink writes through (crate `streamjob-storage`).
pub use streamjob_storage::{retry, store};
