//! The README's table of supported APIs lists exactly what ApiVersions advertises.

use kafkaiq::handlers::api_versions::SUPPORTED;

/// Rows of the README's "Supported APIs" table as (api key, min, max); one row may name several
/// APIs (`11 / 12` with `0–9 / 0–4`).
fn readme_rows() -> Vec<(i16, i16, i16)> {
    let readme = include_str!("../../README.md");
    let section = readme
        .split("## Supported APIs")
        .nth(1)
        .expect("README has a Supported APIs section");
    let mut rows = Vec::new();
    for line in section.lines().take_while(|l| !l.starts_with("## ")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 4 || cells[2].parse::<i16>().is_err() && !cells[2].contains('/') {
            continue;
        }
        let keys: Vec<&str> = cells[2].split('/').map(str::trim).collect();
        let ranges: Vec<&str> = cells[3].split('/').map(str::trim).collect();
        assert_eq!(keys.len(), ranges.len(), "README row {line:?}");
        for (key, range) in keys.iter().zip(ranges) {
            let (min, max) = range.split_once('–').unwrap_or((range, range));
            rows.push((
                key.parse()
                    .unwrap_or_else(|_| panic!("api key in {line:?}")),
                min.parse()
                    .unwrap_or_else(|_| panic!("min version in {line:?}")),
                max.parse()
                    .unwrap_or_else(|_| panic!("max version in {line:?}")),
            ));
        }
    }
    rows.sort();
    rows
}

#[test]
fn readme_api_table_matches_the_advertised_versions() {
    let mut advertised: Vec<(i16, i16, i16)> = SUPPORTED
        .iter()
        .map(|(key, min, max)| (*key as i16, *min, *max))
        .collect();
    advertised.sort();
    assert_eq!(readme_rows(), advertised);
}
