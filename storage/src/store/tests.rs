#![allow(clippy::unwrap_used)]
use std::sync::Arc;

use bytes::Bytes;
use streamjob_crds::v1alpha1::{ConnectionLimits, StorageSpec};

use super::*;

#[test]
fn parses_s3_urls() {
    assert_eq!(
        parse_s3_url("s3://b/x/y/").unwrap(),
        ("b".to_string(), "x/y".to_string())
    );
    assert_eq!(
        parse_s3_url("s3://b").unwrap(),
        ("b".to_string(), String::new())
    );
    assert!(parse_s3_url("s3:///x").is_err());
}

#[tokio::test]
async fn local_store_basics_and_temp_resume() {
    let dir = tempfile::tempdir().unwrap();
    let s = LocalStore::new(dir.path());
    s.put("a/b/c.txt", Bytes::from_static(b"hello"))
        .await
        .unwrap();
    assert_eq!(s.head("a/b/c.txt").await.unwrap(), Some(5));
    assert_eq!(s.head("a/missing").await.unwrap(), None);
    let mut t = s.open_temp("a/.t", None).await.unwrap();
    t.write(b"0123456789").await.unwrap();
    t.sync().await.unwrap();
    drop(t);
    let mut t = s.open_temp("a/.t", Some(4)).await.unwrap();
    t.write(b"xy").await.unwrap();
    t.sync().await.unwrap();
    assert_eq!(&s.get("a/.t").await.unwrap()[..], b"0123xy");
    assert!(matches!(
        s.open_temp("a/.t", Some(100)).await,
        Err(Error::DataLoss(_))
    ));
    s.rename("a/.t", "z/final").await.unwrap();
    let keys: Vec<_> = s
        .list("")
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect();
    assert_eq!(keys, vec!["a/b/c.txt".to_string(), "z/final".to_string()]);
    s.delete("z/final").await.unwrap();
    s.delete("z/final").await.unwrap();
    assert!(s.create_multipart("x").await.is_err());
}

#[tokio::test]
async fn limited_store_times_out_when_full() {
    let dir = tempfile::tempdir().unwrap();
    let inner: Arc<dyn Store> = Arc::new(LocalStore::new(dir.path()));
    let limits = ConnectionLimits {
        max_connections: Some(1),
        max_input_connections: None,
        max_output_connections: Some(1),
        timeout: Some("50ms".into()),
    };
    let s = LimitedStore::new(inner, &limits).unwrap();
    let held = s.acquire(true).await.unwrap();
    let err = s.put("k", Bytes::from_static(b"v")).await.unwrap_err();
    assert!(matches!(err, Error::ConnectionTimeout { .. }));
    assert!(err.is_transient());
    drop(held);
    s.put("k", Bytes::from_static(b"v")).await.unwrap();
    assert_eq!(s.head("k").await.unwrap(), Some(1));
}

#[tokio::test]
async fn prefixed_views_share_one_client_per_store_and_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let limits = StorageSpec {
        limits: Some(ConnectionLimits {
            max_connections: Some(4),
            ..Default::default()
        }),
        ..Default::default()
    };
    let a = open(dir.path().join("a").to_str().unwrap(), Some(&limits)).unwrap();
    let b = open(
        &format!("file://{}", dir.path().join("b").display()),
        Some(&limits),
    )
    .unwrap();
    let unlimited = open(dir.path().join("c").to_str().unwrap(), None).unwrap();
    assert!(a.shares_client_with(&b), "one client for the local disk");
    assert!(
        !a.shares_client_with(&unlimited),
        "other limits, other client"
    );
    let s3 = |bucket: &str| open(&format!("s3://{bucket}/x"), None).unwrap();
    assert!(s3("one").shares_client_with(&s3("one")));
    assert!(!s3("one").shares_client_with(&s3("two")));
    assert!(matches!(
        open("gopher://x/y", None),
        Err(Error::Config(m)) if m.contains("unknown scheme")
    ));
}
