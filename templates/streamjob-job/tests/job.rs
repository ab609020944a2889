//! The template's function through the SDK's harness: exact window totals, across a snapshot
//! and a rescale, and late records handed to the step's bad-record policy.

use std::collections::BTreeMap;

use streamjob_job_template::{Reading, WindowTotal, WindowTotals};
use streamjob_runtime::sdk::harness::{DEFAULT_MAX_PARALLELISM, Harness};

const CONFIG: &[(&str, &str)] = &[("windowSize", "1s"), ("keyColumn", "user")];

/// The harness reads the key column from the input record: a record with the key column.
#[derive(serde::Serialize, serde::Deserialize)]
struct Click {
    user: String,
    value: i64,
}

/// `window-totals` keyed by `user` (its input type only names `value`, so the harness feeds a
/// type with the key column too).
fn factory(setup: &mut streamjob_runtime::sdk::Setup<'_>) -> streamjob_runtime::Result<WithUser> {
    Ok(WithUser(WindowTotals::setup(setup)?))
}

struct WithUser(WindowTotals);

impl streamjob_runtime::sdk::KeyedFunction for WithUser {
    type In = Click;
    type Out = WindowTotal;
    fn process(
        &mut self,
        c: Click,
        cx: &mut streamjob_runtime::sdk::Context<'_, WindowTotal>,
    ) -> streamjob_runtime::Result<()> {
        self.0.process(Reading { value: c.value }, cx)
    }
    fn on_timer(
        &mut self,
        t: streamjob_runtime::sdk::Timer,
        cx: &mut streamjob_runtime::sdk::Context<'_, WindowTotal>,
    ) -> streamjob_runtime::Result<()> {
        self.0.on_timer(t, cx)
    }
}

type Totals = BTreeMap<(String, i64), (i64, i64)>;

fn collect(into: &mut Totals, out: Vec<(WindowTotal, i64)>) {
    for (w, event_time) in out {
        assert_eq!(
            event_time,
            w.window_start + 999,
            "emitted at the window's end"
        );
        let dup = into.insert((w.key, w.window_start), (w.count, w.sum_value));
        assert!(dup.is_none(), "a window was emitted twice");
    }
}

#[test]
fn window_totals_are_exact_across_a_snapshot_and_a_rescale() {
    let records: Vec<(String, i64, i64)> = (0..10_000i64)
        .map(|i| (format!("user-{}", i % 13), i % 100 - 20, 1_000_000 + i))
        .collect();
    let mut want = Totals::new();
    for (user, value, ts) in &records {
        let e = want.entry((user.clone(), ts - ts % 1000)).or_default();
        e.0 += 1;
        e.1 += value;
    }
    let mut got = Totals::new();
    let mut one = Harness::new(factory, CONFIG).unwrap();
    let (first, second) = records.split_at(4_321);
    for (user, value, ts) in first {
        one.process(
            Click {
                user: user.clone(),
                value: *value,
            },
            *ts,
        )
        .unwrap();
    }
    one.watermark(1_002_000).unwrap(); // closes windows 1_000_000 and 1_001_000
    collect(&mut got, one.take_output());
    let snapshot = one.snapshot().unwrap();
    // rescaled to 3: each key goes to the subtask owning its key group
    let mut three: Vec<_> = (0..3)
        .map(|i| {
            Harness::restore(
                &factory,
                CONFIG,
                i,
                3,
                DEFAULT_MAX_PARALLELISM,
                std::slice::from_ref(&snapshot),
                0,
            )
            .unwrap()
        })
        .collect();
    for (user, value, ts) in second {
        // the runtime routes by key group; here: offer the record to the owner of its key
        let owner = owner(user, 3);
        three[owner]
            .process(
                Click {
                    user: user.clone(),
                    value: *value,
                },
                *ts,
            )
            .unwrap();
    }
    for h in &mut three {
        h.watermark(i64::MAX).unwrap();
        collect(&mut got, h.take_output());
        assert_eq!(
            h.sizes(),
            (vec![0], 0),
            "every window emitted and forgotten"
        );
    }
    assert_eq!(got, want);
}

fn owner(user: &str, parallelism: u32) -> usize {
    use streamjob_runtime::keygroups::{KeyValue, key_group_for_key, subtask_for_key_group};
    let kg = key_group_for_key(&[KeyValue::Str(user.into())], DEFAULT_MAX_PARALLELISM);
    subtask_for_key_group(kg, DEFAULT_MAX_PARALLELISM, parallelism) as usize
}

#[test]
fn late_records_are_rejected_not_counted() {
    let mut h = Harness::new(factory, CONFIG).unwrap();
    h.process(
        Click {
            user: "a".into(),
            value: 5,
        },
        1_500,
    )
    .unwrap();
    h.watermark(2_000).unwrap();
    h.process(
        Click {
            user: "a".into(),
            value: 7,
        },
        1_900,
    )
    .unwrap();
    let out = h.take_output();
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].0.count, out[0].0.sum_value), (1, 5));
    assert_eq!(h.rejected().len(), 1);
    assert!(
        h.rejected()[0].reason.starts_with("late record"),
        "{:?}",
        h.rejected()
    );
}

#[test]
fn the_window_state_is_recorded_with_its_type() {
    let h = Harness::new(factory, CONFIG).unwrap();
    let fields: Vec<String> = h
        .state_descriptor()
        .fields
        .iter()
        .map(|f| format!("{}: {}", f.name, f.type_name))
        .collect();
    assert_eq!(
        fields,
        vec![
            "windows: map<Int64, {count: Int64, sum: Int64}>",
            "@timers: timers/v1"
        ]
    );
}
