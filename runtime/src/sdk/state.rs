//! Keyed state handles: [`ValueState`], [`MapState`] and [`ListState`], each scoped to the key of
//! the record (or timer) being processed, with an optional time-to-live.
//!
//! A handle is a typed index into the operator's state tables; the tables live in the engine
//! (the [`super::Context`] reaches them), which snapshots them per key group at every barrier and
//! restores them into whichever subtask owns each key group after a rescale.
//!
//! TTL follows Flink's `StateTtlConfig` defaults: processing time, refreshed on create and write
//! (or also on read), expired values never returned. Expired entries are dropped when they are
//! read and from every snapshot (Flink's full-snapshot cleanup), so they do not outlive the next
//! checkpoint in storage.

use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::marker::PhantomData;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::Context;
use crate::error::{Error, Result};
use crate::keygroups::Key;

/// A type that can live in keyed state: serialised (as JSON) into snapshots, cloned out of
/// [`ListState::get`] and [`MapState::entries`].
pub trait StateValue: Serialize + DeserializeOwned + Clone + Send + 'static {}
impl<T: Serialize + DeserializeOwned + Clone + Send + 'static> StateValue for T {}

/// A map key in [`MapState`].
pub trait StateKey: StateValue + Ord {}
impl<T: StateValue + Ord> StateKey for T {}

/// When a value's time-to-live starts again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TtlUpdate {
    /// When the value is created or written (Flink's `OnCreateAndWrite`, the default).
    #[default]
    OnCreateAndWrite,
    /// Also when it is read (Flink's `OnReadAndWrite`).
    OnReadAndWrite,
}

/// Time-to-live of a piece of state, in processing time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateTtl {
    /// How long a value lives after its last update.
    pub ttl: Duration,
    /// What counts as an update.
    pub update: TtlUpdate,
}

impl StateTtl {
    /// Values expire `ttl` after they were last written.
    pub fn after_write(ttl: Duration) -> Self {
        Self {
            ttl,
            update: TtlUpdate::OnCreateAndWrite,
        }
    }

    /// Values expire `ttl` after they were last read or written.
    pub fn after_access(ttl: Duration) -> Self {
        Self {
            ttl,
            update: TtlUpdate::OnReadAndWrite,
        }
    }

    fn millis(&self) -> i64 {
        i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX)
    }
}

/// A value and when it was last refreshed (processing time, ms); the time is kept only for
/// state with a TTL. State written without a TTL and restored with one is stamped on restore.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Stamped<T> {
    #[serde(rename = "v")]
    pub(crate) value: T,
    #[serde(rename = "t", default, skip_serializing_if = "Option::is_none")]
    pub(crate) touched: Option<i64>,
}

/// The TTL rules of one table.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Expiry(Option<StateTtl>);

impl Expiry {
    fn stamp(&self, now: i64) -> Option<i64> {
        self.0.map(|_| now)
    }
    fn expired<T>(&self, s: &Stamped<T>, now: i64) -> bool {
        match (self.0, s.touched) {
            (Some(ttl), Some(t)) => now.saturating_sub(t) >= ttl.millis(),
            _ => false,
        }
    }
    fn on_read<T>(&self, s: &mut Stamped<T>, now: i64) {
        if let Some(StateTtl {
            update: TtlUpdate::OnReadAndWrite,
            ..
        }) = self.0
        {
            s.touched = Some(now);
        }
    }
    fn restored<T>(&self, mut s: Stamped<T>, now: i64) -> Stamped<T> {
        s.touched = match self.0 {
            None => None,
            Some(_) => Some(s.touched.unwrap_or(now)),
        };
        s
    }
}

/// What a state table does for the engine, whatever its value type.
pub(crate) trait StateTable: Send {
    fn as_any_mut(&mut self) -> &mut dyn Any;
    /// Drops expired entries and hands every live key's entry to `sink` (key, JSON).
    fn snapshot(&mut self, now: i64, sink: &mut dyn FnMut(&Key, serde_json::Value)) -> Result<()>;
    /// Takes back one key's entry written by [`StateTable::snapshot`].
    fn restore(&mut self, key: Key, entry: serde_json::Value, now: i64) -> Result<()>;
    /// Number of keys with state (for tests and metrics).
    fn keys(&self) -> usize;
}

pub(crate) struct Table<E> {
    pub(crate) name: String,
    expiry: Expiry,
    pub(crate) entries: HashMap<Key, E>,
}

impl<E> Table<E> {
    pub(crate) fn new(name: &str, ttl: Option<StateTtl>) -> Self {
        Self {
            name: name.to_string(),
            expiry: Expiry(ttl),
            entries: HashMap::new(),
        }
    }
}

fn decode<T: DeserializeOwned>(name: &str, v: serde_json::Value) -> Result<T> {
    serde_json::from_value(v).map_err(|e| Error::Corrupt {
        path: format!("state {name:?}"),
        message: format!("a restored entry does not decode into the declared type: {e}"),
    })
}

/// Value state: one `T` per key.
pub(crate) type ValueTable<T> = Table<Stamped<T>>;
/// Map state: a sorted map per key, each entry with its own TTL.
pub(crate) type MapTable<K, V> = Table<BTreeMap<K, Stamped<V>>>;
/// List state: a list per key, each element with its own TTL.
pub(crate) type ListTable<T> = Table<Vec<Stamped<T>>>;

impl<T: StateValue> StateTable for ValueTable<T> {
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn snapshot(&mut self, now: i64, sink: &mut dyn FnMut(&Key, serde_json::Value)) -> Result<()> {
        let expiry = self.expiry;
        self.entries.retain(|_, s| !expiry.expired(s, now));
        for (k, s) in &self.entries {
            sink(k, serde_json::to_value(s)?);
        }
        Ok(())
    }
    fn restore(&mut self, key: Key, entry: serde_json::Value, now: i64) -> Result<()> {
        let s: Stamped<T> = decode(&self.name, entry)?;
        self.entries.insert(key, self.expiry.restored(s, now));
        Ok(())
    }
    fn keys(&self) -> usize {
        self.entries.len()
    }
}

impl<K: StateKey, V: StateValue> StateTable for MapTable<K, V> {
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn snapshot(&mut self, now: i64, sink: &mut dyn FnMut(&Key, serde_json::Value)) -> Result<()> {
        let expiry = self.expiry;
        self.entries.retain(|_, m| {
            m.retain(|_, s| !expiry.expired(s, now));
            !m.is_empty()
        });
        for (k, m) in &self.entries {
            // JSON objects only have string keys: a map is written as its list of pairs
            let pairs: Vec<(&K, &Stamped<V>)> = m.iter().collect();
            sink(k, serde_json::to_value(pairs)?);
        }
        Ok(())
    }
    fn restore(&mut self, key: Key, entry: serde_json::Value, now: i64) -> Result<()> {
        let pairs: Vec<(K, Stamped<V>)> = decode(&self.name, entry)?;
        let expiry = self.expiry;
        self.entries.insert(
            key,
            pairs
                .into_iter()
                .map(|(k, s)| (k, expiry.restored(s, now)))
                .collect(),
        );
        Ok(())
    }
    fn keys(&self) -> usize {
        self.entries.len()
    }
}

impl<T: StateValue> StateTable for ListTable<T> {
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn snapshot(&mut self, now: i64, sink: &mut dyn FnMut(&Key, serde_json::Value)) -> Result<()> {
        let expiry = self.expiry;
        self.entries.retain(|_, l| {
            l.retain(|s| !expiry.expired(s, now));
            !l.is_empty()
        });
        for (k, l) in &self.entries {
            sink(k, serde_json::to_value(l)?);
        }
        Ok(())
    }
    fn restore(&mut self, key: Key, entry: serde_json::Value, now: i64) -> Result<()> {
        let list: Vec<Stamped<T>> = decode(&self.name, entry)?;
        let expiry = self.expiry;
        self.entries.insert(
            key,
            list.into_iter().map(|s| expiry.restored(s, now)).collect(),
        );
        Ok(())
    }
    fn keys(&self) -> usize {
        self.entries.len()
    }
}

/// The tables of one operator subtask and the key they are scoped to.
pub(crate) struct Tables {
    pub(crate) tables: Vec<Box<dyn StateTable>>,
    pub(crate) names: Vec<String>,
    pub(crate) current_key: Key,
    /// Processing time of the current call (ms), for TTL.
    pub(crate) now: i64,
}

impl Tables {
    fn table<E: 'static>(&mut self, index: usize, name: &str) -> Result<(&mut Table<E>, &Key, i64)>
    where
        Table<E>: StateTable,
    {
        let Self {
            tables,
            current_key,
            now,
            ..
        } = self;
        let table = tables
            .get_mut(index)
            .and_then(|t| t.as_any_mut().downcast_mut::<Table<E>>())
            .filter(|t| t.name == name)
            .ok_or_else(|| {
                Error::Other(format!(
                    "state handle {name:?} was not declared by this operator's factory (use the handle the factory's Setup returned)"
                ))
            })?;
        Ok((table, current_key, *now))
    }
}

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident<$($t:ident),+>) => {
        $(#[$doc])*
        pub struct $name<$($t),+> {
            index: usize,
            name: String,
            _types: PhantomData<fn() -> ($($t,)+)>,
        }

        impl<$($t),+> $name<$($t),+> {
            pub(crate) fn new(index: usize, name: &str) -> Self {
                Self { index, name: name.to_string(), _types: PhantomData }
            }

            /// The name the state was declared under.
            pub fn name(&self) -> &str {
                &self.name
            }
        }

        impl<$($t),+> Clone for $name<$($t),+> {
            fn clone(&self) -> Self {
                Self::new(self.index, &self.name)
            }
        }
    };
}

handle!(
    /// One value per key (Flink's `ValueState`). Declared with [`super::Setup::value_state`].
    ValueState<T>
);
handle!(
    /// A map per key (Flink's `MapState`). Declared with [`super::Setup::map_state`].
    MapState<K, V>
);
handle!(
    /// A list per key (Flink's `ListState`). Declared with [`super::Setup::list_state`].
    ListState<T>
);

impl<T: StateValue> ValueState<T> {
    /// The current key's value (`None`: never set, cleared or expired).
    pub fn get<'c, O>(&self, cx: &'c mut Context<'_, O>) -> Result<Option<&'c T>> {
        let (table, key, now) = cx.tables.table::<Stamped<T>>(self.index, &self.name)?;
        let expiry = table.expiry;
        if table
            .entries
            .get(key)
            .is_some_and(|s| expiry.expired(s, now))
        {
            table.entries.remove(key);
            return Ok(None);
        }
        Ok(table.entries.get_mut(key).map(|s| {
            expiry.on_read(s, now);
            &s.value
        }))
    }

    /// Sets the current key's value.
    pub fn set<O>(&self, cx: &mut Context<'_, O>, value: T) -> Result<()> {
        let (table, key, now) = cx.tables.table::<Stamped<T>>(self.index, &self.name)?;
        let touched = table.expiry.stamp(now);
        match table.entries.get_mut(key) {
            Some(s) => *s = Stamped { value, touched },
            None => {
                table
                    .entries
                    .insert(key.clone(), Stamped { value, touched });
            }
        }
        Ok(())
    }

    /// Removes the current key's value.
    pub fn clear<O>(&self, cx: &mut Context<'_, O>) -> Result<()> {
        let (table, key, _) = cx.tables.table::<Stamped<T>>(self.index, &self.name)?;
        table.entries.remove(key);
        Ok(())
    }
}

impl<K: StateKey, V: StateValue> MapState<K, V> {
    /// The current key's value under `k`.
    pub fn get<'c, O>(&self, cx: &'c mut Context<'_, O>, k: &K) -> Result<Option<&'c V>> {
        let (table, key, now) = cx
            .tables
            .table::<BTreeMap<K, Stamped<V>>>(self.index, &self.name)?;
        let expiry = table.expiry;
        let Some(map) = table.entries.get_mut(key) else {
            return Ok(None);
        };
        if map.get(k).is_some_and(|s| expiry.expired(s, now)) {
            map.remove(k);
            return Ok(None);
        }
        Ok(map.get_mut(k).map(|s| {
            expiry.on_read(s, now);
            &s.value
        }))
    }

    /// Puts `v` under `k` for the current key.
    pub fn put<O>(&self, cx: &mut Context<'_, O>, k: K, v: V) -> Result<()> {
        let (table, key, now) = cx
            .tables
            .table::<BTreeMap<K, Stamped<V>>>(self.index, &self.name)?;
        let touched = table.expiry.stamp(now);
        let entry = Stamped { value: v, touched };
        match table.entries.get_mut(key) {
            Some(map) => {
                map.insert(k, entry);
            }
            None => {
                table
                    .entries
                    .insert(key.clone(), BTreeMap::from([(k, entry)]));
            }
        }
        Ok(())
    }

    /// Removes `k` from the current key's map.
    pub fn remove<O>(&self, cx: &mut Context<'_, O>, k: &K) -> Result<()> {
        let (table, key, _) = cx
            .tables
            .table::<BTreeMap<K, Stamped<V>>>(self.index, &self.name)?;
        if let Some(map) = table.entries.get_mut(key) {
            map.remove(k);
            if map.is_empty() {
                table.entries.remove(key);
            }
        }
        Ok(())
    }

    /// The current key's live entries, in key order.
    pub fn entries<O>(&self, cx: &mut Context<'_, O>) -> Result<Vec<(K, V)>> {
        let (table, key, now) = cx
            .tables
            .table::<BTreeMap<K, Stamped<V>>>(self.index, &self.name)?;
        let expiry = table.expiry;
        let Some(map) = table.entries.get_mut(key) else {
            return Ok(Vec::new());
        };
        map.retain(|_, s| !expiry.expired(s, now));
        Ok(map
            .iter_mut()
            .map(|(k, s)| {
                expiry.on_read(s, now);
                (k.clone(), s.value.clone())
            })
            .collect())
    }

    /// Removes the current key's whole map.
    pub fn clear<O>(&self, cx: &mut Context<'_, O>) -> Result<()> {
        let (table, key, _) = cx
            .tables
            .table::<BTreeMap<K, Stamped<V>>>(self.index, &self.name)?;
        table.entries.remove(key);
        Ok(())
    }
}

impl<T: StateValue> ListState<T> {
    /// Appends to the current key's list.
    pub fn add<O>(&self, cx: &mut Context<'_, O>, value: T) -> Result<()> {
        let (table, key, now) = cx.tables.table::<Vec<Stamped<T>>>(self.index, &self.name)?;
        let touched = table.expiry.stamp(now);
        let element = Stamped { value, touched };
        match table.entries.get_mut(key) {
            Some(list) => list.push(element),
            None => {
                table.entries.insert(key.clone(), vec![element]);
            }
        }
        Ok(())
    }

    /// The current key's live elements, oldest first.
    pub fn get<O>(&self, cx: &mut Context<'_, O>) -> Result<Vec<T>> {
        let (table, key, now) = cx.tables.table::<Vec<Stamped<T>>>(self.index, &self.name)?;
        let expiry = table.expiry;
        let Some(list) = table.entries.get_mut(key) else {
            return Ok(Vec::new());
        };
        list.retain(|s| !expiry.expired(s, now));
        Ok(list
            .iter_mut()
            .map(|s| {
                expiry.on_read(s, now);
                s.value.clone()
            })
            .collect())
    }

    /// Replaces the current key's list.
    pub fn update<O>(&self, cx: &mut Context<'_, O>, values: Vec<T>) -> Result<()> {
        let (table, key, now) = cx.tables.table::<Vec<Stamped<T>>>(self.index, &self.name)?;
        let touched = table.expiry.stamp(now);
        if values.is_empty() {
            table.entries.remove(key);
        } else {
            table.entries.insert(
                key.clone(),
                values
                    .into_iter()
                    .map(|value| Stamped { value, touched })
                    .collect(),
            );
        }
        Ok(())
    }

    /// Removes the current key's list.
    pub fn clear<O>(&self, cx: &mut Context<'_, O>) -> Result<()> {
        let (table, key, _) = cx.tables.table::<Vec<Stamped<T>>>(self.index, &self.name)?;
        table.entries.remove(key);
        Ok(())
    }
}
