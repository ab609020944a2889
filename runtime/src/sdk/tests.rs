//! The SDK through its harness: state, timers, TTL, snapshots and rescaling, with every record
//! counted.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::harness::{DEFAULT_MAX_PARALLELISM, Harness};
use super::*;
use crate::operator::SubtaskSnapshot;

#[derive(Serialize, Deserialize, Clone, Debug)]
struct Click {
    user: String,
    url: String,
    bytes: i64,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Summary {
    user: String,
    clicks: i64,
    urls: i64,
    last_bytes: Vec<i64>,
    fired: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Total {
    bytes: i64,
    first_seen: i64,
}

/// Every kind of state and both timer domains: per user, a click count (value), bytes per URL
/// (map), the last three sizes (list); an event-time timer 100 ms after each click and a
/// processing-time timer 1 s after the first one.
struct Everything {
    clicks: ValueState<i64>,
    per_url: MapState<String, Total>,
    recent: ListState<i64>,
}

impl KeyedFunction for Everything {
    type In = Click;
    type Out = Summary;

    fn process(&mut self, c: Click, cx: &mut Context<'_, Summary>) -> Result<()> {
        if c.bytes < 0 {
            cx.reject(format!("negative size {}", c.bytes));
            return Ok(());
        }
        let clicks = self.clicks.get(cx)?.copied().unwrap_or(0) + 1;
        self.clicks.set(cx, clicks)?;
        let first_seen = cx.timestamp();
        let total = match self.per_url.get(cx, &c.url)? {
            Some(t) => Total {
                bytes: t.bytes + c.bytes,
                first_seen: t.first_seen,
            },
            None => Total {
                bytes: c.bytes,
                first_seen,
            },
        };
        self.per_url.put(cx, c.url.clone(), total)?;
        let mut recent = self.recent.get(cx)?;
        recent.push(c.bytes);
        let keep = recent.len().saturating_sub(3);
        self.recent.update(cx, recent.split_off(keep))?;
        cx.register_event_time_timer(cx.timestamp() + 100)?;
        if clicks == 1 {
            let at = cx.now() + 1000;
            cx.register_processing_time_timer(at)?;
        }
        let summary = self.summary(cx, None)?;
        cx.emit(summary);
        Ok(())
    }

    fn on_timer(&mut self, timer: Timer, cx: &mut Context<'_, Summary>) -> Result<()> {
        let what = format!("{:?}@{}", timer.domain, timer.timestamp);
        let summary = self.summary(cx, Some(what))?;
        cx.emit(summary);
        Ok(())
    }
}

impl Everything {
    fn summary(&self, cx: &mut Context<'_, Summary>, fired: Option<String>) -> Result<Summary> {
        let user = match cx.key().first() {
            Some(crate::keygroups::KeyValue::Str(s)) => s.clone(),
            other => return Err(Error::Other(format!("unexpected key {other:?}"))),
        };
        Ok(Summary {
            user,
            clicks: self.clicks.get(cx)?.copied().unwrap_or(0),
            urls: self.per_url.entries(cx)?.len() as i64,
            last_bytes: self.recent.get(cx)?,
            fired,
        })
    }
}

fn everything(setup: &mut Setup<'_>) -> Result<Everything> {
    setup.key_by(&["user"]);
    setup.timers();
    Ok(Everything {
        clicks: setup.value_state("clicks")?,
        per_url: setup.map_state("perUrl")?,
        recent: setup.list_state("recent")?,
    })
}

fn click(user: usize, url: usize, bytes: i64) -> Click {
    Click {
        user: format!("user-{user}"),
        url: format!("/page/{url}"),
        bytes,
    }
}

#[test]
fn declared_state_is_described_from_its_rust_types() {
    let h = Harness::new(everything, &[]).unwrap();
    let d = h.state_descriptor();
    let fields: Vec<(&str, &str)> = d
        .fields
        .iter()
        .map(|f| (f.name.as_str(), f.type_name.as_str()))
        .collect();
    assert_eq!(
        fields,
        vec![
            ("clicks", "value<Int64>"),
            ("perUrl", "map<Utf8, {bytes: Int64, first_seen: Int64}>"),
            ("recent", "list<Int64>"),
            ("@timers", "timers/v1"),
        ]
    );
    assert_eq!(d.key_type.as_deref(), Some("Utf8"));
}

#[test]
fn state_and_timers_survive_snapshots_and_rescaling_with_every_record_counted() {
    const USERS: usize = 40;
    const CLICKS: usize = 2000;
    let mut expected_clicks: BTreeMap<String, i64> = BTreeMap::new();
    // phase 1: one subtask
    let mut h = Harness::new(everything, &[]).unwrap();
    for i in 0..CLICKS / 2 {
        let c = click(i % USERS, i % 7, i as i64);
        *expected_clicks.entry(c.user.clone()).or_default() += 1;
        h.process(c, 1000 + i as i64).unwrap();
    }
    assert_eq!(h.take_output().len(), CLICKS / 2);
    let (sizes, timers) = h.sizes();
    assert_eq!(sizes, vec![USERS, USERS, USERS]);
    // one event-time timer per distinct (user, time) and one processing-time timer per user
    assert_eq!(timers, CLICKS / 2 + USERS);
    let snap = h.snapshot().unwrap();

    // phase 2: restored into 3 subtasks; each key's state lands in exactly one of them
    let mut subtasks: Vec<Harness<Everything>> = (0..3)
        .map(|i| {
            Harness::restore(
                &everything,
                &[],
                i,
                3,
                DEFAULT_MAX_PARALLELISM,
                std::slice::from_ref(&snap),
                0,
            )
            .unwrap()
        })
        .collect();
    let owned: usize = subtasks.iter().map(|h| h.sizes().0[0]).sum();
    assert_eq!(owned, USERS);
    let route = |user: &str| {
        let key = vec![crate::keygroups::KeyValue::Str(user.to_string())];
        let kg = crate::keygroups::key_group_for_key(&key, DEFAULT_MAX_PARALLELISM);
        crate::keygroups::subtask_for_key_group(kg, DEFAULT_MAX_PARALLELISM, 3) as usize
    };
    let mut last: BTreeMap<String, Summary> = BTreeMap::new();
    for i in CLICKS / 2..CLICKS {
        let c = click(i % USERS, i % 7, i as i64);
        *expected_clicks.entry(c.user.clone()).or_default() += 1;
        let s = route(&c.user);
        subtasks[s].process(c, 1000 + i as i64).unwrap();
        for (out, _) in subtasks[s].take_output() {
            last.insert(out.user.clone(), out);
        }
    }
    for (user, n) in &expected_clicks {
        let s = &last[user];
        assert_eq!(s.clicks, *n, "{user}");
        assert_eq!(s.urls, 7.min(*n), "{user}");
        assert_eq!(s.last_bytes.len(), 3);
    }

    // phase 3: stop at 3, restore at 2; every event timer fires once at the final watermark
    let snaps: Vec<SubtaskSnapshot> = subtasks.iter_mut().map(|h| h.snapshot().unwrap()).collect();
    let mut fired = 0;
    let mut processing_fired = 0;
    for i in 0..2 {
        let mut h =
            Harness::restore(&everything, &[], i, 2, DEFAULT_MAX_PARALLELISM, &snaps, 0).unwrap();
        h.watermark(i64::MAX).unwrap();
        fired += h.take_output().len();
        h.set_processing_time(999).unwrap();
        assert!(h.take_output().is_empty(), "processing timers fired early");
        h.set_processing_time(1000).unwrap();
        processing_fired += h.take_output().len();
        assert_eq!(h.sizes().1, 0);
    }
    // every click registered a timer at its own event time + 100: all distinct
    assert_eq!(fired, CLICKS);
    assert_eq!(processing_fired, USERS);
}

#[test]
fn event_timers_fire_in_order_at_the_watermark_with_their_timestamp() {
    let mut h = Harness::new(everything, &[]).unwrap();
    h.process(click(1, 1, 5), 1000).unwrap();
    h.process(click(1, 1, 5), 1000).unwrap(); // same timer: fires once
    h.process(click(2, 1, 5), 1050).unwrap();
    h.take_output();
    h.watermark(1099).unwrap();
    assert!(h.take_output().is_empty());
    h.watermark(1100).unwrap();
    let out = h.take_output();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0.fired.as_deref(), Some("EventTime@1100"));
    assert_eq!(out[0].1, 1100, "a timer's output carries the timer's time");
    assert_eq!(out[0].0.clicks, 2, "the timer sees its key's state");
    h.watermark(2000).unwrap();
    let out = h.take_output();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0.user, "user-2");
}

#[test]
fn rejected_records_go_to_the_bad_record_policy_and_leave_state_alone() {
    let mut h = Harness::new(everything, &[]).unwrap();
    h.process(click(1, 1, -3), 1000).unwrap();
    h.process(click(1, 1, 4), 1000).unwrap();
    assert_eq!(h.rejected().len(), 1);
    assert_eq!(h.rejected()[0].reason, "negative size -3");
    assert!(h.rejected()[0].record.contains("\"bytes\":-3"));
    let out = h.take_output();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0.clicks, 1);
}

/// Value with a TTL after write, map entries with a TTL after access.
struct Expiring {
    last: ValueState<String>,
    seen: MapState<String, i64>,
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Seen {
    user: String,
    previous: Option<String>,
    urls: Vec<String>,
}

impl KeyedFunction for Expiring {
    type In = Click;
    type Out = Seen;
    fn process(&mut self, c: Click, cx: &mut Context<'_, Seen>) -> Result<()> {
        let previous = self.last.get(cx)?.cloned();
        self.last.set(cx, c.url.clone())?;
        if c.bytes > 0 {
            self.seen.put(cx, c.url.clone(), c.bytes)?;
        }
        let urls = self.seen.entries(cx)?.into_iter().map(|(k, _)| k).collect();
        cx.emit(Seen {
            user: c.user,
            previous,
            urls,
        });
        Ok(())
    }
}

fn expiring(setup: &mut Setup<'_>) -> Result<Expiring> {
    setup.key_by(&["user"]);
    Ok(Expiring {
        last: setup.value_state_with_ttl("last", StateTtl::after_write(Duration::from_secs(1)))?,
        seen: setup.map_state_with_ttl("seen", StateTtl::after_access(Duration::from_secs(1)))?,
    })
}

#[test]
fn ttl_expires_values_after_write_and_map_entries_after_access() {
    let mut h = Harness::new(expiring, &[]).unwrap();
    let at = |h: &mut Harness<Expiring>, now: i64, url: usize, bytes: i64| {
        h.set_processing_time(now).unwrap();
        h.process(click(1, url, bytes), 0).unwrap();
        h.take_output().pop().unwrap().0
    };
    assert_eq!(at(&mut h, 0, 1, 1).previous, None);
    // written at 0, read at 999: alive; the read does not refresh a write-TTL
    assert_eq!(at(&mut h, 999, 2, 0).previous.as_deref(), Some("/page/1"));
    // written again at 999: alive until 1999
    let s = at(&mut h, 1998, 3, 0);
    assert_eq!(s.previous.as_deref(), Some("/page/2"));
    // "/page/1" was put at 0 and read at 999 (refreshes an access-TTL), read again at 1998
    assert_eq!(s.urls, vec!["/page/1"]);
    let s = at(&mut h, 3998, 4, 0);
    assert_eq!(s.previous, None, "written at 1998, expired at 2998");
    assert!(s.urls.is_empty(), "last accessed at 1998, expired at 2998");
    // expired entries are not written into snapshots
    h.set_processing_time(5000).unwrap();
    let snap = h.snapshot().unwrap();
    assert!(snap.keyed.is_empty(), "{snap:?}");
}

#[test]
fn state_written_without_ttl_is_stamped_when_restored_with_one() {
    fn no_ttl(setup: &mut Setup<'_>) -> Result<Expiring> {
        setup.key_by(&["user"]);
        Ok(Expiring {
            last: setup.value_state("last")?,
            seen: setup.map_state("seen")?,
        })
    }
    let mut h = Harness::new(no_ttl, &[]).unwrap();
    h.process(click(1, 1, 1), 0).unwrap();
    let snap = h.snapshot().unwrap();
    let mut h = Harness::restore(&expiring, &[], 0, 1, 128, &[snap], 10_000).unwrap();
    h.set_processing_time(10_999).unwrap();
    h.process(click(1, 2, 0), 0).unwrap();
    assert_eq!(h.take_output()[0].0.previous.as_deref(), Some("/page/1"));
}

#[derive(Serialize, Deserialize)]
struct NoSuchColumn {
    missing: String,
}

struct Reads;
impl KeyedFunction for Reads {
    type In = NoSuchColumn;
    type Out = Summary;
    fn process(&mut self, _: NoSuchColumn, _: &mut Context<'_, Summary>) -> Result<()> {
        Ok(())
    }
}

#[test]
fn declaration_mistakes_are_refused_with_what_to_do() {
    let err = |r: Result<Harness<Everything>>| r.err().map(|e| e.to_string()).unwrap_or_default();
    let e = err(Harness::new(
        |s: &mut Setup<'_>| {
            let _ = s.value_state::<i64>("a")?;
            let _ = s.value_state::<i64>("a")?;
            everything(s)
        },
        &[],
    ));
    assert!(e.contains("state \"a\" is declared twice"), "{e}");
    let e = err(Harness::new(
        |s: &mut Setup<'_>| {
            let f = everything(s)?;
            s.key_by(&[]);
            Ok(f)
        },
        &[],
    ));
    assert!(e.contains("setup.key_by"), "{e}");
    let e = err(Harness::new(
        |s: &mut Setup<'_>| {
            s.require_config("window")?;
            everything(s)
        },
        &[],
    ));
    assert!(e.contains("custom.config.window is required"), "{e}");

    // a function that reads a column the input lacks
    let input: arrow::datatypes::SchemaRef =
        Arc::new(Schema::new(vec![Field::new("user", DataType::Utf8, false)]));
    let config = BTreeMap::new();
    let mut setup = Setup::new("r", &config, &input);
    setup.key_by(&["user"]);
    let e = declared::<Reads>("r", &input, &setup)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("reads column \"missing\""), "{e}");

    // timers used without being declared fail the call, naming the fix
    struct Undeclared;
    impl KeyedFunction for Undeclared {
        type In = Click;
        type Out = Summary;
        fn process(&mut self, _: Click, cx: &mut Context<'_, Summary>) -> Result<()> {
            cx.register_event_time_timer(1)
        }
    }
    let mut h = Harness::new(
        |s: &mut Setup<'_>| {
            s.key_by(&["user"]);
            Ok(Undeclared)
        },
        &[],
    )
    .unwrap();
    let e = h.process(click(1, 1, 1), 0).unwrap_err().to_string();
    assert!(e.contains("setup.timers()"), "{e}");
}
