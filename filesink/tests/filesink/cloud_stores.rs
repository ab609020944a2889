//! The file sink and the directory view on GCS (fake-gcs-server) and Azure Blob Storage
//! (Azurite): the crash matrix of every format (shared with MinIO), exactly once, and what
//! checkpoints, savepoints and fencing need.

use super::*;
use streamjob_crds::v1alpha1::{GcsStorage, StorageSpec};

#[path = "../../../tools/emulators/launch.rs"]
mod emulators;

/// GCS as a manifest configures it for the emulator: its endpoint, no credentials.
fn gcs_storage(url: &str) -> StorageSpec {
    StorageSpec {
        gcs: Some(GcsStorage {
            endpoint: Some(url.to_string()),
            anonymous: true,
            service_account_key_secret: None,
        }),
        ..Default::default()
    }
}

/// An Azurite container through `object_store`'s Azure client with the emulator's account key
/// (the runtime gets the key from its environment, which a test cannot set in-process).
fn azurite_store(az: &emulators::Emulator, container: &str, prefix: &str) -> Arc<dyn Store> {
    let client = object_store::azure::MicrosoftAzureBuilder::new()
        .with_account(emulators::AZURITE_ACCOUNT)
        .with_access_key(emulators::AZURITE_KEY)
        .with_endpoint(az.url.clone())
        .with_allow_http(true)
        .with_container_name(container)
        .build()
        .unwrap();
    Arc::new(streamjob_filesink::store::CloudStore::azure(
        client, container, prefix,
    ))
}

/// The crash matrix of one format on one store: 24 MB in one daily bucket, files of two or
/// three parts (5 MiB) rolled at 12 MiB, tails carried in checkpoint state; every record once.
pub(super) async fn cloud_matrix(label: &str, inner: Arc<dyn Store>, fmt: Fmt) -> Job {
    let input = input(24, 250, 4000);
    let mut s = spec("ignored://", fmt, "12MiB");
    if let Some(dt) = s
        .bucket_assigner
        .as_mut()
        .and_then(|b| b.date_time.as_mut())
    {
        dt.format = "%Y-%m-%d".into();
    }
    let mut job = Job::new(s, inner.clone(), 8);
    let budgets = [1, 2, 3, 5, 8, 4, 13];
    let attempts = job.run(&input, &plan(&budgets)).await;
    assert!(
        attempts >= 6,
        "{label} {fmt:?}: only {attempts} attempts: the crash plan did not bite"
    );
    let (files, bytes) = verify(inner.as_ref(), fmt, &input).await;
    let largest = inner
        .list("")
        .await
        .unwrap()
        .into_iter()
        .filter(|o| is_finished(&o.key))
        .map(|o| o.size)
        .max()
        .unwrap();
    eprintln!(
        "{label} {fmt:?}: {attempts} attempts, {files} files, {bytes} bytes, largest {largest}"
    );
    assert!(largest > 5 << 20, "no file above one 5 MiB part: {largest}");
    let markers = inner
        .list(streamjob_filesink::sink::UPLOAD_MARKERS)
        .await
        .unwrap();
    assert!(
        markers.is_empty(),
        "{label}: upload markers left: {markers:?}"
    );
    job
}

#[tokio::test]
async fn gcs_exactly_once_json_csv_gzip_parquet_and_directory_view() {
    let gcs = emulators::fake_gcs(&["sink", "ck"]);
    let storage = gcs_storage(&gcs.url);
    for fmt in [Fmt::Json, Fmt::CsvGzip, Fmt::Parquet] {
        let url = format!("gs://sink/out-{fmt:?}");
        let inner = streamjob_filesink::store::open_store(&url, Some(&storage)).unwrap();
        let job = cloud_matrix("GCS", inner.clone(), fmt).await;
        // every upload the sink recorded was committed or aborted: no part objects left of it
        let open: Vec<_> = inner
            .list_multipart_uploads("")
            .await
            .unwrap()
            .into_iter()
            .filter(|u| {
                job.fault_store
                    .marked
                    .lock()
                    .unwrap()
                    .contains(&u.upload_id)
            })
            .collect();
        assert!(
            open.is_empty(),
            "recorded uploads left in .inprogress/: {open:?}"
        );
    }
    let ck = streamjob_filesink::store::open("gs://ck/jobs/j1", Some(&storage)).unwrap();
    check_directory_view(&ck).await;
    // a commit whose parts are gone names the file as lost
    let store = streamjob_filesink::store::open_store("gs://ck/lost", Some(&storage)).unwrap();
    let id = store.create_multipart("b/f").await.unwrap();
    let gone = streamjob_filesink::part::Committable::Multipart {
        upload_id: id.clone(),
        etags: vec![format!(".inprogress/lost/b/f/{id}/part-00000")],
        size: 10,
    };
    let err = streamjob_filesink::part::commit(store.as_ref(), "b/f", &gone)
        .await
        .unwrap_err();
    assert!(
        matches!(err, streamjob_filesink::Error::DataLoss(ref m) if m.contains("b/f")),
        "{err:?}"
    );
}

/// More than 32 parts: composed through intermediate objects, which go with the parts.
#[tokio::test]
async fn gcs_commit_composes_more_than_32_parts() {
    let gcs = emulators::fake_gcs(&["many"]);
    let storage = gcs_storage(&gcs.url);
    let store = streamjob_filesink::store::open_store("gs://many/x", Some(&storage)).unwrap();
    let id = store.create_multipart("f").await.unwrap();
    let mut etags = Vec::new();
    let mut expected = Vec::new();
    for i in 0..70u8 {
        let part = vec![i; 1000 + usize::from(i)];
        expected.extend_from_slice(&part);
        etags.push(
            store
                .put_part("f", &id, usize::from(i), Bytes::from(part))
                .await
                .unwrap(),
        );
    }
    assert_eq!(
        store.head("f").await.unwrap(),
        None,
        "visible before the commit"
    );
    store.complete_multipart("f", &id, &etags).await.unwrap();
    assert_eq!(&store.get("f").await.unwrap()[..], &expected[..]);
    let left = store.list_multipart_uploads("").await.unwrap();
    assert!(left.is_empty(), "parts or intermediates left: {left:?}");
    let all = store.list("").await.unwrap();
    assert_eq!(all.len(), 1, "{all:?}");
}

#[tokio::test]
async fn azure_exactly_once_json_csv_gzip_parquet_and_directory_view() {
    let az = emulators::azurite(&["sink", "checkpoints"]);
    for fmt in [Fmt::Json, Fmt::CsvGzip, Fmt::Parquet] {
        let inner = azurite_store(&az, "sink", &format!("out-{fmt:?}"));
        cloud_matrix("Azure", inner, fmt).await;
    }
    let ck = azurite_store(&az, "checkpoints", "jobs/j1");
    check_directory_view(ck.as_ref()).await;
}
