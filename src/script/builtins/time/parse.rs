//! Reading a time written in a Go layout, with Go's rules: a missing date is
//! January 1 of year 0, a missing zone is UTC, a run of spaces matches any run.

use super::layout::{Element, LONG_MONTHS, LONG_WEEKDAYS, elements};

/// Why a value did not match its layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot parse {value:?} as {layout:?}: {reason}")]
pub struct Error {
    pub value: String,
    pub layout: String,
    pub reason: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The fields a value gave, before they are checked against the calendar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    pub year: i64,
    pub month: u8,
    pub day: u8,
    pub hour: u8,
    pub minute: u8,
    pub second: u8,
    pub nanos: u32,
    /// Seconds east of UTC, when the value named an offset or a zone.
    pub offset: Option<i32>,
    /// The zone abbreviation the value named (`MST`), if any.
    pub zone: Option<String>,
}

/// Reads `value` as `layout`.
///
/// # Errors
/// The first element the value does not match, or text left over after the layout.
pub fn parse(layout: &str, value: &str) -> Result<Parsed> {
    let fail = |reason: String| Error {
        value: value.to_owned(),
        layout: layout.to_owned(),
        reason,
    };
    let mut p = Parsed {
        year: 0,
        month: 1,
        day: 1,
        hour: 0,
        minute: 0,
        second: 0,
        nanos: 0,
        offset: None,
        zone: None,
    };
    let mut pm: Option<bool> = None;
    let mut yday: Option<u16> = None;
    let elements = elements(layout);
    let mut rest = value;
    for (i, element) in elements.iter().enumerate() {
        let before = rest;
        let next_is_fraction = matches!(elements.get(i + 1), Some(Element::Fraction { .. }));
        let step = read(
            *element,
            &mut rest,
            &mut p,
            &mut pm,
            &mut yday,
            next_is_fraction,
        );
        step.map_err(|what| fail(format!("{what} at {before:?}")))?;
    }
    if !rest.is_empty() {
        return Err(fail(format!("extra text {rest:?}")));
    }
    match pm {
        Some(true) if p.hour < 12 => p.hour += 12,
        Some(false) if p.hour == 12 => p.hour = 0,
        _ => {}
    }
    if let Some(yday) = yday {
        let (month, day) = month_day_of(p.year, yday)
            .ok_or_else(|| fail(format!("day of year {yday} out of range")))?;
        p.month = month;
        p.day = day;
    }
    if p.day > days_in_month(p.year, p.month) {
        return Err(fail(format!("day {} out of range for the month", p.day)));
    }
    Ok(p)
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

/// Days in `month` (1..=12) of `year`.
pub fn days_in_month(year: i64, month: u8) -> u8 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

fn month_day_of(year: i64, yday: u16) -> Option<(u8, u8)> {
    let mut left = yday;
    for month in 1..=12 {
        let days = u16::from(days_in_month(year, month));
        if left >= 1 && left <= days {
            return Some((month, u8::try_from(left).ok()?));
        }
        left = left.checked_sub(days)?;
    }
    None
}

/// Leading ASCII digits of `s`: at least `min`, at most `max`.
fn digits(rest: &mut &str, min: usize, max: usize) -> Result<u32, &'static str> {
    let n = rest
        .bytes()
        .take(max)
        .take_while(u8::is_ascii_digit)
        .count();
    if n < min {
        return Err("expected a number");
    }
    let value = rest[..n].parse().map_err(|_| "bad number")?;
    *rest = &rest[n..];
    Ok(value)
}

fn ranged(n: u32, low: u32, high: u32, what: &'static str) -> Result<u8, &'static str> {
    if n < low || n > high {
        return Err(what);
    }
    u8::try_from(n).map_err(|_| what)
}

/// The index of the name at the start of `rest` (case-insensitive), consuming it.
fn name(rest: &mut &str, names: &[&str], len: Option<usize>) -> Option<usize> {
    names.iter().position(|n| {
        let n = len.map_or(*n, |l| &n[..l]);
        let found = rest
            .get(..n.len())
            .is_some_and(|r| r.eq_ignore_ascii_case(n));
        if found {
            *rest = &rest[n.len()..];
        }
        found
    })
}

/// Nanoseconds from up to nine fraction digits (more are dropped).
fn nanos_of(frac: &str) -> u32 {
    let kept = &frac[..frac.len().min(9)];
    let scale = 10u32.pow(u32::try_from(9 - kept.len()).unwrap_or(0));
    kept.parse::<u32>().unwrap_or(0) * scale
}

/// A `.123` fraction at the start of `rest`, if there is one.
fn fraction(rest: &mut &str) -> Option<u32> {
    let mut chars = rest.chars();
    let sep = chars.next()?;
    if !(sep == '.' || sep == ',') || !chars.next().is_some_and(|c| c.is_ascii_digit()) {
        return None;
    }
    let n = rest[1..].bytes().take_while(u8::is_ascii_digit).count();
    let nanos = nanos_of(&rest[1..=n]);
    *rest = &rest[1 + n..];
    Some(nanos)
}

fn sign(rest: &mut &str) -> Result<i32, &'static str> {
    let s = match rest.as_bytes().first() {
        Some(b'+') => 1,
        Some(b'-') => -1,
        _ => return Err("expected a UTC offset such as +01:00"),
    };
    *rest = &rest[1..];
    Ok(s)
}

fn read_offset(rest: &mut &str, fields: u8, colons: bool) -> Result<i32, &'static str> {
    let sign = sign(rest)?;
    let mut total = 0;
    for (i, unit) in [3600, 60, 1].iter().take(usize::from(fields)).enumerate() {
        if i > 0 && colons {
            *rest = rest.strip_prefix(':').ok_or("expected ':' in the offset")?;
        }
        let n = digits(rest, 2, 2)?;
        let limit = if i == 0 { 24 } else { 59 };
        if n > limit {
            return Err("offset out of range");
        }
        total += i32::try_from(n).map_err(|_| "offset out of range")? * unit;
    }
    Ok(sign * total)
}

/// A zone abbreviation: `UTC`, `GMT` with an optional `+h`, or three to five capitals
/// (read as UTC, as Go does for a zone it does not know).
fn read_zone(rest: &mut &str, p: &mut Parsed) -> Result<(), &'static str> {
    let n = rest.bytes().take_while(u8::is_ascii_uppercase).count();
    if !(3..=5).contains(&n) {
        return Err("expected a time zone abbreviation such as UTC");
    }
    let abbreviation = &rest[..n];
    *rest = &rest[n..];
    let mut offset = 0;
    if abbreviation == "GMT" && rest.starts_with(['+', '-']) {
        let sign = sign(rest)?;
        let hours = digits(rest, 1, 2)?;
        if hours > 14 {
            return Err("GMT offset out of range");
        }
        offset = sign * i32::try_from(hours).map_err(|_| "GMT offset out of range")? * 3600;
    }
    p.offset = Some(offset);
    p.zone = (offset == 0).then(|| abbreviation.to_owned());
    Ok(())
}

/// Matches literal text, where a run of spaces matches any run (even none at the end).
fn literal(rest: &mut &str, text: &str) -> Result<(), &'static str> {
    let mut text = text;
    while let Some(c) = text.chars().next() {
        if c == ' ' {
            if !rest.is_empty() && !rest.starts_with(' ') {
                return Err("expected a space");
            }
            text = text.trim_start_matches(' ');
            *rest = rest.trim_start_matches(' ');
            continue;
        }
        *rest = rest
            .strip_prefix(c)
            .ok_or("the text does not match the layout")?;
        text = &text[c.len_utf8()..];
    }
    Ok(())
}

#[expect(
    clippy::too_many_lines,
    reason = "one arm per element of a Go layout, a closed set (Element)"
)]
fn read(
    element: Element,
    rest: &mut &str,
    p: &mut Parsed,
    pm: &mut Option<bool>,
    yday: &mut Option<u16>,
    next_is_fraction: bool,
) -> Result<(), &'static str> {
    match element {
        Element::Literal(text) => literal(rest, text)?,
        Element::LongYear => {
            let negative = rest.starts_with('-');
            if negative {
                *rest = &rest[1..];
            }
            let y = i64::from(digits(rest, 4, 4)?);
            p.year = if negative { -y } else { y };
        }
        Element::Year => {
            let y = i64::from(digits(rest, 2, 2)?);
            p.year = y + if y >= 69 { 1900 } else { 2000 };
        }
        Element::LongMonth | Element::Month => {
            let len = (element == Element::Month).then_some(3);
            let m = name(rest, &LONG_MONTHS, len).ok_or("expected a month name")?;
            p.month = u8::try_from(m + 1).map_err(|_| "month out of range")?;
        }
        Element::NumMonth | Element::ZeroMonth => {
            let min = if element == Element::ZeroMonth { 2 } else { 1 };
            p.month = ranged(digits(rest, min, 2)?, 1, 12, "month out of range")?;
        }
        Element::LongWeekday | Element::Weekday => {
            let len = (element == Element::Weekday).then_some(3);
            name(rest, &LONG_WEEKDAYS, len).ok_or("expected a weekday name")?;
        }
        Element::Day | Element::UnderDay | Element::ZeroDay => {
            if element == Element::UnderDay {
                *rest = rest.strip_prefix(' ').unwrap_or(rest);
            }
            let min = if element == Element::ZeroDay { 2 } else { 1 };
            p.day = ranged(digits(rest, min, 2)?, 1, 31, "day out of range")?;
        }
        Element::UnderYearDay | Element::ZeroYearDay => {
            if element == Element::UnderYearDay {
                *rest = rest.trim_start_matches(' ');
            }
            let min = if element == Element::ZeroYearDay {
                3
            } else {
                1
            };
            let n = digits(rest, min, 3)?;
            if !(1..=366).contains(&n) {
                return Err("day of year out of range");
            }
            *yday = u16::try_from(n).ok();
        }
        Element::Hour => p.hour = ranged(digits(rest, 1, 2)?, 0, 23, "hour out of range")?,
        Element::Hour12 | Element::ZeroHour12 => {
            let min = if element == Element::ZeroHour12 { 2 } else { 1 };
            p.hour = ranged(digits(rest, min, 2)?, 0, 12, "hour out of range")?;
        }
        Element::Minute | Element::ZeroMinute => {
            let min = if element == Element::ZeroMinute { 2 } else { 1 };
            p.minute = ranged(digits(rest, min, 2)?, 0, 59, "minute out of range")?;
        }
        Element::Second | Element::ZeroSecond => {
            let min = if element == Element::ZeroSecond { 2 } else { 1 };
            p.second = ranged(digits(rest, min, 2)?, 0, 59, "second out of range")?;
            // Go reads a fraction after the seconds even when the layout has none.
            if !next_is_fraction && let Some(nanos) = fraction(rest) {
                p.nanos = nanos;
            }
        }
        Element::UpperPm | Element::LowerPm => {
            let (am, pm_text) = if element == Element::UpperPm {
                ("AM", "PM")
            } else {
                ("am", "pm")
            };
            if let Some(r) = rest.strip_prefix(pm_text) {
                *pm = Some(true);
                *rest = r;
            } else if let Some(r) = rest.strip_prefix(am) {
                *pm = Some(false);
                *rest = r;
            } else {
                return Err("expected AM or PM");
            }
        }
        Element::ZoneName => read_zone(rest, p)?,
        Element::Offset { z, fields, colons } => {
            if z && let Some(r) = rest.strip_prefix('Z') {
                *rest = r;
                p.offset = Some(0);
            } else {
                p.offset = Some(read_offset(rest, fields, colons)?);
            }
        }
        Element::Fraction {
            sep,
            digits: n,
            trim,
        } => {
            if trim {
                if let Some(nanos) = fraction(rest) {
                    p.nanos = nanos;
                }
            } else {
                *rest = rest
                    .strip_prefix(sep)
                    .ok_or("expected fractional seconds")?;
                let got = digits(rest, usize::from(n), usize::from(n))?;
                p.nanos = got * 10u32.pow(9 - u32::from(n));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_go_layouts() {
        let p = parse("2006-01-02T15:04:05Z07:00", "2025-06-15T10:00:00+02:00").unwrap();
        assert_eq!((p.year, p.month, p.day, p.hour), (2025, 6, 15, 10));
        assert_eq!(p.offset, Some(7200));
        let p = parse("Jan _2 3:04PM", "Mar  7 9:30PM").unwrap();
        assert_eq!(
            (p.year, p.month, p.day, p.hour, p.minute),
            (0, 3, 7, 21, 30)
        );
        let p = parse("2006-01-02 15:04:05", "2025-01-01 00:00:01.25").unwrap();
        assert_eq!(p.nanos, 250_000_000);
        let p = parse("02 Jan 06 15:04 MST", "15 Jan 25 14:30 PST").unwrap();
        assert_eq!(
            (p.year, p.offset, p.zone.as_deref()),
            (2025, Some(0), Some("PST"))
        );
        let p = parse("2006 002", "2024 060").unwrap();
        assert_eq!((p.month, p.day), (2, 29));
        let p = parse("15:04:05.000", "01:02:03.045").unwrap();
        assert_eq!(p.nanos, 45_000_000);
    }

    #[test]
    fn says_what_did_not_match() {
        let e = parse("2006-01-02", "2025-13-01").unwrap_err();
        assert!(e.to_string().contains("month out of range"), "{e}");
        let e = parse("2006-01-02", "2025-02-30").unwrap_err();
        assert!(e.to_string().contains("day 30 out of range"), "{e}");
        let e = parse("2006-01-02", "2025-01-01 extra").unwrap_err();
        assert!(e.to_string().contains("extra text"), "{e}");
        let e = parse("2006-01-02", "yesterday").unwrap_err();
        assert!(e.to_string().contains("expected a number"), "{e}");
    }
}
