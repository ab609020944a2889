//! Durations (`30s`, `1h30m`, `250ms`) and sizes (`128MiB`, `1GB`) as users write them in manifests.

use std::time::Duration;

use crate::{Error, Result};

/// The schema pattern for durations; kept in step with [`parse_duration`].
pub const DURATION_PATTERN: &str = r"^([0-9]+(ms|s|m|h|d))+$";

/// The schema pattern for sizes; kept in step with [`parse_size`].
pub const SIZE_PATTERN: &str = r"^[0-9]+(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?$";

/// Parses a duration made of one or more `<number><unit>` groups, units `ms`, `s`, `m`, `h`, `d`.
/// `field` names the manifest field in the error message.
pub fn parse_duration(field: &str, value: &str) -> Result<Duration> {
    let err = || Error::Duration {
        field: field.to_string(),
        value: value.to_string(),
    };
    if value.is_empty() {
        return Err(err());
    }
    let mut total = Duration::ZERO;
    let mut rest = value;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(err());
        }
        let number: u64 = rest[..digits].parse().map_err(|_| err())?;
        rest = &rest[digits..];
        let (unit_millis, unit_len) = if rest.starts_with("ms") {
            (1, 2)
        } else if rest.starts_with('s') {
            (1_000, 1)
        } else if rest.starts_with('m') {
            (60_000, 1)
        } else if rest.starts_with('h') {
            (3_600_000, 1)
        } else if rest.starts_with('d') {
            (86_400_000, 1)
        } else {
            return Err(err());
        };
        rest = &rest[unit_len..];
        let millis = number.checked_mul(unit_millis).ok_or_else(err)?;
        total = total
            .checked_add(Duration::from_millis(millis))
            .ok_or_else(err)?;
    }
    Ok(total)
}

/// Parses a size in bytes with an optional decimal (`KB`, `MB`, ...) or binary (`KiB`, `MiB`, ...) unit.
pub fn parse_size(field: &str, value: &str) -> Result<u64> {
    let err = || Error::Size {
        field: field.to_string(),
        value: value.to_string(),
    };
    let digits = value.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err(err());
    }
    let number: u64 = value[..digits].parse().map_err(|_| err())?;
    let multiplier: u64 = match &value[digits..] {
        "" | "B" => 1,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        _ => return Err(err()),
    };
    number.checked_mul(multiplier).ok_or_else(err)
}

/// Formats a duration the way manifests write it, largest units first (`90s` → `1m30s`).
pub fn format_duration(duration: Duration) -> String {
    let mut millis = duration.as_millis();
    if millis == 0 {
        return "0s".to_string();
    }
    let mut out = String::new();
    for (unit, size) in [
        ("d", 86_400_000u128),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ] {
        if millis >= size {
            out.push_str(&format!("{}{unit}", millis / size));
            millis %= size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_every_unit_and_combination() {
        assert_eq!(
            parse_duration("f", "250ms").unwrap(),
            Duration::from_millis(250)
        );
        assert_eq!(parse_duration("f", "30s").unwrap(), Duration::from_secs(30));
        assert_eq!(
            parse_duration("f", "1h30m").unwrap(),
            Duration::from_secs(5400)
        );
        assert_eq!(
            parse_duration("f", "7d").unwrap(),
            Duration::from_secs(7 * 86_400)
        );
        assert_eq!(
            parse_duration("f", "1m1ms").unwrap(),
            Duration::from_millis(60_001)
        );
    }

    #[test]
    fn bad_durations_name_the_field() {
        for bad in [
            "",
            "30",
            "s",
            "1.5s",
            "10 s",
            "5w",
            "-1s",
            "99999999999999999999d",
        ] {
            let err = parse_duration("spec.checkpoints.interval", bad).unwrap_err();
            assert!(
                err.to_string().contains("spec.checkpoints.interval"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn sizes_parse_decimal_and_binary_units() {
        assert_eq!(parse_size("f", "100").unwrap(), 100);
        assert_eq!(parse_size("f", "5MiB").unwrap(), 5 * 1024 * 1024);
        assert_eq!(parse_size("f", "1GB").unwrap(), 1_000_000_000);
        assert_eq!(parse_size("f", "2KiB").unwrap(), 2048);
        for bad in ["", "MiB", "1.5MiB", "1 MiB", "1mb", "99999999999TiB"] {
            assert!(parse_size("f", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn schema_patterns_agree_with_parsers() {
        // The API server checks the patterns, the runtime the parsers: a value must pass both or neither.
        let duration_re = regex::Regex::new(DURATION_PATTERN).unwrap();
        for value in [
            "30s", "1h30m", "250ms", "7d", "", "30", "1.5s", "5w", "10 s", "ms",
        ] {
            assert_eq!(
                duration_re.is_match(value),
                parse_duration("f", value).is_ok(),
                "{value:?}"
            );
        }
        let size_re = regex::Regex::new(SIZE_PATTERN).unwrap();
        for value in [
            "100", "5MiB", "1GB", "2KiB", "", "MiB", "1.5MiB", "1 MiB", "1mb",
        ] {
            assert_eq!(
                size_re.is_match(value),
                parse_size("f", value).is_ok(),
                "{value:?}"
            );
        }
    }

    #[test]
    fn formatted_durations_parse_back() {
        assert_eq!(format_duration(Duration::from_secs(90)), "1m30s");
        let odd = Duration::from_millis(90_061_001);
        assert_eq!(parse_duration("f", &format_duration(odd)).unwrap(), odd);
    }
}
