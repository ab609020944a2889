//! The benchmark queries and their input tables, as defined in `bench/README.md`.

use std::fmt;

use serde::Serialize;
use streamjob_crds::v1alpha1::FieldType;

/// An input file both engines read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Table {
    /// `bids.csv`
    Bids,
    /// `generator.csv`
    Generator,
}

impl Table {
    /// File name inside the input directory.
    pub fn file_name(self) -> &'static str {
        match self {
            Table::Bids => "bids.csv",
            Table::Generator => "generator.csv",
        }
    }

    /// Short name (sub-directory of the per-table view the runtime's `files` source reads).
    pub fn name(self) -> &'static str {
        match self {
            Table::Bids => "bids",
            Table::Generator => "generator",
        }
    }

    /// Columns of the CSV file, in order.
    pub fn columns(self) -> &'static [(&'static str, FieldType)] {
        match self {
            Table::Bids => &[
                ("auction", FieldType::Int64),
                ("bidder", FieldType::Int64),
                ("price", FieldType::Int64),
                ("channel", FieldType::String),
                ("url", FieldType::String),
                ("date_time", FieldType::Int64),
                ("extra", FieldType::String),
            ],
            Table::Generator => &[
                ("id", FieldType::Uint64),
                ("key", FieldType::String),
                ("value", FieldType::Int64),
                ("ts", FieldType::Int64),
            ],
        }
    }

    /// Event-time column (epoch ms).
    pub fn event_time_column(self) -> &'static str {
        match self {
            Table::Bids => "date_time",
            Table::Generator => "ts",
        }
    }
}

/// Column type of a query's output, as the checksums see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ColType {
    Int64,
    Double,
    String,
}

impl ColType {
    /// Name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            ColType::Int64 => "int64",
            ColType::Double => "double",
            ColType::String => "string",
        }
    }
}

/// A benchmark query.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Query {
    #[serde(rename = "q0")]
    Q0,
    #[serde(rename = "q1")]
    Q1,
    #[serde(rename = "q2")]
    Q2,
    #[serde(rename = "q5")]
    Q5,
    #[serde(rename = "q7")]
    Q7,
    #[serde(rename = "gen-count")]
    GenCount,
}

impl Query {
    /// All queries, in report order.
    pub const ALL: [Query; 6] = [
        Query::Q0,
        Query::Q1,
        Query::Q2,
        Query::Q5,
        Query::Q7,
        Query::GenCount,
    ];

    /// Name as `bench/flink/run.sh` and `bench/tools/expected.py` spell it.
    pub fn name(self) -> &'static str {
        match self {
            Query::Q0 => "q0",
            Query::Q1 => "q1",
            Query::Q2 => "q2",
            Query::Q5 => "q5",
            Query::Q7 => "q7",
            Query::GenCount => "gen-count",
        }
    }

    /// Parses a query name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|q| q.name() == s)
    }

    /// The input table.
    pub fn table(self) -> Table {
        match self {
            Query::GenCount => Table::Generator,
            _ => Table::Bids,
        }
    }

    /// Output columns (name, type), in order.
    pub fn output_columns(self) -> &'static [(&'static str, ColType)] {
        use ColType::*;
        match self {
            Query::Q0 => &[
                ("auction", Int64),
                ("bidder", Int64),
                ("price", Int64),
                ("channel", String),
                ("url", String),
                ("date_time", Int64),
                ("extra", String),
            ],
            Query::Q1 => &[
                ("auction", Int64),
                ("bidder", Int64),
                ("price_eur", Double),
                ("date_time", Int64),
            ],
            Query::Q2 => &[("auction", Int64), ("price", Int64)],
            Query::Q5 => &[
                ("auction", Int64),
                ("window_start", Int64),
                ("window_end", Int64),
                ("count", Int64),
            ],
            Query::Q7 => &[
                ("window_start", Int64),
                ("window_end", Int64),
                ("max_price", Int64),
            ],
            Query::GenCount => &[
                ("key", String),
                ("window_start", Int64),
                ("window_end", Int64),
                ("count", Int64),
                ("sum_value", Int64),
            ],
        }
    }

    /// The column whose checksum is the headline `outputSum`.
    pub fn sum_column(self) -> &'static str {
        match self {
            Query::Q0 | Query::Q2 => "price",
            Query::Q1 => "price_eur",
            Query::Q5 => "count",
            Query::Q7 => "max_price",
            Query::GenCount => "sum_value",
        }
    }
}

impl fmt::Display for Query {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for q in Query::ALL {
            assert_eq!(Query::parse(q.name()), Some(q));
            assert!(q.output_columns().iter().any(|(c, _)| *c == q.sum_column()));
        }
        assert_eq!(Query::parse("q3"), None);
    }
}
