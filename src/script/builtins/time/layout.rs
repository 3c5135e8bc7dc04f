//! Go reference-time layouts (`2006-01-02T15:04:05Z07:00`): splitting a layout into
//! its elements, and writing a time with one. Reading is in `parse.rs`.

/// One element of a layout: a piece of the reference time, or literal text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Element<'a> {
    Literal(&'a str),
    LongMonth,
    Month,
    NumMonth,
    ZeroMonth,
    LongWeekday,
    Weekday,
    Day,
    UnderDay,
    ZeroDay,
    UnderYearDay,
    ZeroYearDay,
    Hour,
    Hour12,
    ZeroHour12,
    Minute,
    ZeroMinute,
    Second,
    ZeroSecond,
    LongYear,
    Year,
    UpperPm,
    LowerPm,
    ZoneName,
    /// A numeric offset: `z` when `Z` stands in for UTC, the number of fields (hours,
    /// minutes, seconds) and whether they are separated by colons.
    Offset {
        z: bool,
        fields: u8,
        colons: bool,
    },
    /// Fractional seconds after `sep` (`.` or `,`): `digits` of them, or as many as
    /// needed (up to `digits`, none for a whole second) when `trim`.
    Fraction {
        sep: char,
        digits: u8,
        trim: bool,
    },
}

pub const LONG_MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

pub const LONG_WEEKDAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// The reference-time pieces, longest first where one starts another.
const PIECES: &[(&str, Element<'static>)] = &[
    ("January", Element::LongMonth),
    ("Jan", Element::Month),
    ("Monday", Element::LongWeekday),
    ("Mon", Element::Weekday),
    ("MST", Element::ZoneName),
    ("002", Element::ZeroYearDay),
    ("01", Element::ZeroMonth),
    ("02", Element::ZeroDay),
    ("03", Element::ZeroHour12),
    ("04", Element::ZeroMinute),
    ("05", Element::ZeroSecond),
    ("06", Element::Year),
    ("15", Element::Hour),
    ("1", Element::NumMonth),
    ("2006", Element::LongYear),
    ("2", Element::Day),
    ("__2", Element::UnderYearDay),
    ("_2", Element::UnderDay),
    ("3", Element::Hour12),
    ("4", Element::Minute),
    ("5", Element::Second),
    ("PM", Element::UpperPm),
    ("pm", Element::LowerPm),
    ("Z070000", offset(true, 3, false)),
    ("Z07:00:00", offset(true, 3, true)),
    ("Z0700", offset(true, 2, false)),
    ("Z07:00", offset(true, 2, true)),
    ("Z07", offset(true, 1, false)),
    ("-070000", offset(false, 3, false)),
    ("-07:00:00", offset(false, 3, true)),
    ("-0700", offset(false, 2, false)),
    ("-07:00", offset(false, 2, true)),
    ("-07", offset(false, 1, false)),
];

const fn offset(z: bool, fields: u8, colons: bool) -> Element<'static> {
    Element::Offset { z, fields, colons }
}

/// The element at the start of `s`, with its length, if one starts there.
fn piece_at(s: &str) -> Option<(Element<'static>, usize)> {
    // "_2006" is a literal underscore before the year, as in Go.
    if s.starts_with("_2006") {
        return None;
    }
    if let Some(fraction) = fraction_at(s) {
        return Some(fraction);
    }
    PIECES
        .iter()
        .find(|(text, _)| s.starts_with(text))
        .map(|(text, e)| (*e, text.len()))
}

/// `.000`/`,999`-style fractional seconds at the start of `s` (not followed by a digit).
fn fraction_at(s: &str) -> Option<(Element<'static>, usize)> {
    let mut chars = s.chars();
    let sep = chars.next().filter(|c| *c == '.' || *c == ',')?;
    let digit = chars.next().filter(|c| *c == '0' || *c == '9')?;
    let run = 1 + s[2..].chars().take_while(|c| *c == digit).count();
    if s[1 + run..].starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let digits = u8::try_from(run.min(9)).unwrap_or(9);
    let trim = digit == '9';
    Some((Element::Fraction { sep, digits, trim }, 1 + run))
}

/// Splits `layout` into its elements; text that is not a piece of the reference time
/// is literal.
pub fn elements(layout: &str) -> Vec<Element<'_>> {
    let mut out = Vec::new();
    let mut literal_start = 0;
    let mut i = 0;
    while i < layout.len() {
        if let Some((element, len)) = piece_at(&layout[i..]) {
            if literal_start < i {
                out.push(Element::Literal(&layout[literal_start..i]));
            }
            out.push(element);
            i += len;
            literal_start = i;
        } else {
            i += layout[i..].chars().next().map_or(1, char::len_utf8);
        }
    }
    if literal_start < layout.len() {
        out.push(Element::Literal(&layout[literal_start..]));
    }
    out
}

/// A time broken into the fields a layout writes.
#[derive(Debug, Clone)]
pub struct Fields {
    pub year: i64,
    /// 1..=12
    pub month: u8,
    pub day: u8,
    /// 1..=366
    pub yday: u16,
    /// 0 = Sunday
    pub weekday: u8,
    pub hour: u8,
    pub minute: u8,
    pub second: u8,
    pub nanos: u32,
    /// Seconds east of UTC.
    pub offset: i32,
    /// The zone's abbreviation, if it has one ("UTC").
    pub zone: Option<String>,
}

/// Writes `n` with at least `width` digits (zero padded), sign first.
fn padded(out: &mut String, n: i64, width: usize) {
    if n < 0 {
        out.push('-');
    }
    out.push_str(&format!("{:0width$}", n.unsigned_abs()));
}

fn write_offset(out: &mut String, offset: i32, fields: u8, colons: bool) {
    out.push(if offset < 0 { '-' } else { '+' });
    let abs = offset.unsigned_abs();
    let parts = [abs / 3600, abs / 60 % 60, abs % 60];
    for (i, part) in parts.iter().take(usize::from(fields)).enumerate() {
        if i > 0 && colons {
            out.push(':');
        }
        out.push_str(&format!("{part:02}"));
    }
}

/// Writes `f` as `layout` says.
pub fn format(f: &Fields, layout: &str) -> String {
    let mut out = String::with_capacity(layout.len() + 8);
    let hour12 = match f.hour % 12 {
        0 => 12,
        h => h,
    };
    for element in elements(layout) {
        match element {
            Element::Literal(s) => out.push_str(s),
            Element::LongMonth => out.push_str(LONG_MONTHS[usize::from(f.month - 1)]),
            Element::Month => out.push_str(&LONG_MONTHS[usize::from(f.month - 1)][..3]),
            Element::NumMonth => out.push_str(&f.month.to_string()),
            Element::ZeroMonth => padded(&mut out, i64::from(f.month), 2),
            Element::LongWeekday => out.push_str(LONG_WEEKDAYS[usize::from(f.weekday)]),
            Element::Weekday => out.push_str(&LONG_WEEKDAYS[usize::from(f.weekday)][..3]),
            Element::Day => out.push_str(&f.day.to_string()),
            Element::UnderDay => out.push_str(&format!("{:>2}", f.day)),
            Element::ZeroDay => padded(&mut out, i64::from(f.day), 2),
            Element::UnderYearDay => out.push_str(&format!("{:>3}", f.yday)),
            Element::ZeroYearDay => padded(&mut out, i64::from(f.yday), 3),
            Element::Hour => padded(&mut out, i64::from(f.hour), 2),
            Element::Hour12 => out.push_str(&hour12.to_string()),
            Element::ZeroHour12 => padded(&mut out, i64::from(hour12), 2),
            Element::Minute => out.push_str(&f.minute.to_string()),
            Element::ZeroMinute => padded(&mut out, i64::from(f.minute), 2),
            Element::Second => out.push_str(&f.second.to_string()),
            Element::ZeroSecond => padded(&mut out, i64::from(f.second), 2),
            Element::LongYear => padded(&mut out, f.year, 4),
            Element::Year => padded(&mut out, f.year.rem_euclid(100), 2),
            Element::UpperPm => out.push_str(if f.hour >= 12 { "PM" } else { "AM" }),
            Element::LowerPm => out.push_str(if f.hour >= 12 { "pm" } else { "am" }),
            Element::ZoneName => match &f.zone {
                Some(name) => out.push_str(name),
                None => write_offset(&mut out, f.offset, 2, false),
            },
            Element::Offset { z, fields, colons } => {
                if z && f.offset == 0 {
                    out.push('Z');
                } else {
                    write_offset(&mut out, f.offset, fields, colons);
                }
            }
            Element::Fraction { sep, digits, trim } => {
                let all = format!("{:09}", f.nanos);
                let mut shown = &all[..usize::from(digits)];
                if trim {
                    shown = shown.trim_end_matches('0');
                }
                if !shown.is_empty() {
                    out.push(sep);
                    out.push_str(shown);
                }
            }
        }
    }
    out
}

/// Upstream's named formats (`t.string("date")`), matched ignoring case.
const PRESETS: &[(&str, &str)] = &[
    ("rfc3339", RFC3339),
    ("rfc3339nano", RFC3339_NANO),
    ("kitchen", KITCHEN),
    ("datetime", DATE_TIME),
    ("date", DATE_ONLY),
    ("time", TIME_ONLY),
    ("stamp", STAMP),
    ("rfc822", RFC822),
    ("rfc1123", RFC1123),
    ("rfc850", RFC850),
];

pub const RFC3339: &str = "2006-01-02T15:04:05Z07:00";
pub const RFC3339_NANO: &str = "2006-01-02T15:04:05.999999999Z07:00";
pub const RFC1123: &str = "Mon, 02 Jan 2006 15:04:05 MST";
pub const RFC1123Z: &str = "Mon, 02 Jan 2006 15:04:05 -0700";
pub const RFC822: &str = "02 Jan 06 15:04 MST";
pub const RFC822Z: &str = "02 Jan 06 15:04 -0700";
pub const RFC850: &str = "Monday, 02-Jan-06 15:04:05 MST";
pub const KITCHEN: &str = "3:04PM";
pub const STAMP: &str = "Jan _2 15:04:05";
pub const DATE_TIME: &str = "2006-01-02 15:04:05";
pub const DATE_ONLY: &str = "2006-01-02";
pub const TIME_ONLY: &str = "15:04:05";

/// The Go layout a script's format names: "" (RFC 3339), a preset name, a strftime
/// pattern (anything with `%`), or a Go layout as it is.
pub fn resolve(format: &str) -> std::borrow::Cow<'_, str> {
    if format.is_empty() {
        return RFC3339.into();
    }
    if let Some((_, layout)) = PRESETS
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(format))
    {
        return (*layout).into();
    }
    if format.contains('%') {
        return from_strftime(format).into();
    }
    format.into()
}

/// The Go layout for a strftime pattern (`%Y-%m-%d`), as upstream converts them.
pub fn from_strftime(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(d) = chars.next() else {
            out.push('%');
            break;
        };
        let go = match d {
            '%' => "%",
            'Y' => "2006",
            'm' => "01",
            'd' => "02",
            'H' => "15",
            'I' => "03",
            'M' => "04",
            'S' => "05",
            'p' => "PM",
            'a' => "Mon",
            'A' => "Monday",
            'b' => "Jan",
            'B' => "January",
            'Z' => "MST",
            'z' => "-0700",
            other => {
                out.push('%');
                out.push(other);
                continue;
            }
        };
        out.push_str(go);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Fields {
        Fields {
            year: 2025,
            month: 1,
            day: 5,
            yday: 5,
            weekday: 0,
            hour: 14,
            minute: 3,
            second: 9,
            nanos: 120_000_000,
            offset: -7 * 3600,
            zone: None,
        }
    }

    #[test]
    fn formats_every_piece() {
        let f = sample();
        let cases = [
            ("2006-01-02T15:04:05Z07:00", "2025-01-05T14:03:09-07:00"),
            ("Mon Jan _2 3:4:5 PM 06", "Sun Jan  5 2:3:9 PM 25"),
            (
                "Monday, January 2, 2006 03pm",
                "Sunday, January 5, 2025 02pm",
            ),
            ("15:04:05.000 .999 ,9", "14:03:09.120 .12 ,1"),
            (
                "MST -0700 -07 Z07:00:00 002 __2",
                "-0700 -0700 -07 -07:00:00 005   5",
            ),
            ("_2006", "_2025"),
            ("hello", "hello"),
        ];
        for (layout, want) in cases {
            assert_eq!(format(&f, layout), want, "{layout}");
        }
        let utc = Fields {
            offset: 0,
            zone: Some("UTC".into()),
            nanos: 0,
            ..sample()
        };
        assert_eq!(format(&utc, "Z07:00 MST .999"), "Z UTC ");
    }

    #[test]
    fn converts_strftime() {
        assert_eq!(from_strftime("%Y/%m/%d %H:%M:%S"), "2006/01/02 15:04:05");
        assert_eq!(from_strftime("100%% %q %"), "100% %q %");
    }
}
