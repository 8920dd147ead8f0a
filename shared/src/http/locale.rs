//! Request locales: BCP 47 canonicalisation, the request's preferred locale and locale chains.

use http::HeaderMap;

use super::cookies::get_cookie;

pub const LOCALE_HEADER: &str = "x-cloud-locale";
pub const LOCALE_COOKIE: &str = "cloud.locale";
/// The locale used when nothing else names one.
pub const DEFAULT_LOCALE: &str = "en";
/// Longest tag considered; anything longer is not a locale a person picked.
const MAX_TAG_CHARS: usize = 64;

/// Canonical form of a BCP 47 language tag (`DE-ch` → `de-CH`, `zh-hant-tw` → `zh-Hant-TW`), or
/// `None` when it is not a well-formed tag: language (2–3 or 5–8 letters), optional script
/// (4 letters), optional region (2 letters or 3 digits), variants, extensions. Private-use-only
/// tags, wildcards and underscores are not locales.
pub fn canonicalize_locale(tag: &str) -> Option<String> {
    let tag = tag.trim();
    if tag.is_empty() || tag.len() > MAX_TAG_CHARS || !tag.is_ascii() {
        return None;
    }
    let parts: Vec<&str> = tag.split('-').collect();
    let mut out: Vec<String> = Vec::with_capacity(parts.len());
    let mut index = 0;

    let language = parts[index];
    let alpha = |s: &str| s.bytes().all(|b| b.is_ascii_alphabetic());
    let alnum = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric());
    if !(alpha(language) && matches!(language.len(), 2 | 3 | 5..=8)) {
        return None;
    }
    out.push(language.to_ascii_lowercase());
    index += 1;

    if let Some(script) = parts.get(index)
        && script.len() == 4
        && alpha(script)
    {
        let lower = script.to_ascii_lowercase();
        out.push(lower[..1].to_ascii_uppercase() + &lower[1..]);
        index += 1;
    }
    if let Some(region) = parts.get(index)
        && ((region.len() == 2 && alpha(region))
            || (region.len() == 3 && region.bytes().all(|b| b.is_ascii_digit())))
    {
        out.push(region.to_ascii_uppercase());
        index += 1;
    }
    let mut variants: Vec<String> = Vec::new();
    while let Some(variant) = parts.get(index) {
        let is_variant = alnum(variant)
            && ((5..=8).contains(&variant.len())
                || (variant.len() == 4 && variant.as_bytes()[0].is_ascii_digit()));
        if !is_variant {
            break;
        }
        let lower = variant.to_ascii_lowercase();
        if variants.contains(&lower) {
            return None;
        }
        variants.push(lower);
        index += 1;
    }
    out.extend(variants);
    // Extensions (`u-ca-gregory`) and a trailing private-use part (`x-foo`).
    while let Some(singleton) = parts.get(index) {
        if singleton.len() != 1 || !alnum(singleton) {
            return None;
        }
        let private = singleton.eq_ignore_ascii_case("x");
        let min = if private { 1 } else { 2 };
        out.push(singleton.to_ascii_lowercase());
        index += 1;
        let start = index;
        while let Some(sub) = parts.get(index) {
            if !(alnum(sub) && (min..=8).contains(&sub.len())) || (!private && sub.len() == 1) {
                break;
            }
            out.push(sub.to_ascii_lowercase());
            index += 1;
        }
        if index == start {
            return None;
        }
        if private {
            break;
        }
    }
    if index != parts.len() {
        return None;
    }
    Some(out.join("-"))
}

/// The tags of an `Accept-Language` header in preference order (quality descending, then order of
/// appearance), skipping `q=0`, wildcards and malformed entries. Tags are canonicalised.
pub fn accept_language_tags(header: &str) -> Vec<String> {
    let mut weighted: Vec<(u32, usize, String)> = Vec::new();
    for (position, entry) in header.split(',').enumerate().take(32) {
        let mut pieces = entry.split(';');
        let Some(tag) = pieces.next().map(str::trim) else {
            continue;
        };
        let mut quality = 1000u32;
        for parameter in pieces {
            if let Some((name, value)) = parameter.split_once('=')
                && name.trim().eq_ignore_ascii_case("q")
            {
                quality = parse_quality(value.trim()).unwrap_or(0);
            }
        }
        if quality == 0 {
            continue;
        }
        if let Some(canonical) = canonicalize_locale(tag) {
            weighted.push((quality, position, canonical));
        }
    }
    weighted.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    weighted.into_iter().map(|(_, _, tag)| tag).collect()
}

/// A quality value (`0`..`1` with up to three decimals) in thousandths.
fn parse_quality(value: &str) -> Option<u32> {
    let parsed: f64 = value.parse().ok()?;
    if !(0.0..=1.0).contains(&parsed) {
        return None;
    }
    Some((parsed * 1000.0).round() as u32)
}

/// The locale the request asks for, if any: the `x-cloud-locale` header, else the `cloud.locale`
/// cookie, else the first usable `Accept-Language` tag. Invalid values are skipped.
pub fn preferred_locale(headers: &HeaderMap) -> Option<String> {
    if let Some(tag) = headers
        .get(LOCALE_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(canonicalize_locale)
    {
        return Some(tag);
    }
    if let Some(tag) = get_cookie(headers, LOCALE_COOKIE).and_then(canonicalize_locale) {
        return Some(tag);
    }
    headers
        .get_all(http::header::ACCEPT_LANGUAGE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(accept_language_tags)
        .next()
}

/// The request locale: [`preferred_locale`], else the installation's `app.locale` setting when it
/// is a valid tag, else `en`.
pub fn request_locale(headers: &HeaderMap, installation_locale: Option<&str>) -> String {
    preferred_locale(headers)
        .or_else(|| installation_locale.and_then(canonicalize_locale))
        .unwrap_or_else(|| DEFAULT_LOCALE.to_string())
}

/// The locales to try for content in `requested`, most specific first: the tag, each ancestor
/// (`de-CH` → `de-CH`, `de`), then `base` unless already present. Sibling regions are never tried.
/// An invalid or empty request yields just `[base]`.
pub fn locale_chain(requested: Option<&str>, base: &str) -> Vec<String> {
    let base = canonicalize_locale(base).unwrap_or_else(|| DEFAULT_LOCALE.to_string());
    let mut chain = Vec::new();
    if let Some(tag) = requested.and_then(canonicalize_locale) {
        let mut current = tag.as_str();
        loop {
            chain.push(current.to_string());
            match current.rfind('-') {
                Some(cut) => current = &current[..cut],
                None => break,
            }
        }
    }
    if !chain.contains(&base) {
        chain.push(base);
    }
    chain
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use proptest::prelude::*;

    #[test]
    fn canonicalises_case_of_each_subtag() {
        let cases = [
            ("DE-ch", Some("de-CH")),
            ("de", Some("de")),
            ("zh-hant-tw", Some("zh-Hant-TW")),
            ("sr-LATN", Some("sr-Latn")),
            ("es-419", Some("es-419")),
            ("de-CH-1996", Some("de-CH-1996")),
            ("en-US-u-ca-gregory", Some("en-US-u-ca-gregory")),
            ("en-x-private", Some("en-x-private")),
            (" en ", Some("en")),
            ("", None),
            ("*", None),
            ("en_US", None),
            ("e", None),
            ("abcd", None),
            ("en-", None),
            ("en--US", None),
            ("x-private", None),
            ("de-CH-1996-1996", None),
            ("ümlaut", None),
            ("en-US-u", None),
        ];
        for (input, expected) in cases {
            assert_eq!(canonicalize_locale(input).as_deref(), expected, "{input:?}");
        }
    }

    #[test]
    fn accept_language_is_ordered_by_quality_then_position() {
        assert_eq!(
            accept_language_tags("fr;q=0.5, de-ch, *;q=0.1, en;q=0.9, it;q=0"),
            vec!["de-CH", "en", "fr"]
        );
        assert_eq!(
            accept_language_tags("not_a_tag;;, ;q=1, 1x"),
            Vec::<String>::new()
        );
        assert_eq!(accept_language_tags("en;q=0.8, de;q=0.8"), vec!["en", "de"]);
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                http::HeaderName::from_bytes(name.as_bytes()).expect("name"),
                HeaderValue::from_str(value).expect("value"),
            );
        }
        map
    }

    #[test]
    fn request_locale_follows_header_cookie_accept_language_setting_default() {
        let all = [
            ("x-cloud-locale", "de-ch"),
            ("cookie", "cloud.locale=fr"),
            ("accept-language", "it"),
        ];
        assert_eq!(request_locale(&headers(&all), Some("es")), "de-CH");
        assert_eq!(request_locale(&headers(&all[1..]), Some("es")), "fr");
        assert_eq!(request_locale(&headers(&all[2..]), Some("es")), "it");
        assert_eq!(request_locale(&headers(&[]), Some("es")), "es");
        assert_eq!(request_locale(&headers(&[]), None), "en");
        assert_eq!(request_locale(&headers(&[]), Some("not a tag")), "en");
    }

    #[test]
    fn invalid_values_are_skipped_not_fatal() {
        let map = headers(&[
            ("x-cloud-locale", "!!"),
            ("cookie", "cloud.locale=en_US"),
            ("accept-language", "*, pt-br;q=0.7"),
        ]);
        assert_eq!(preferred_locale(&map).as_deref(), Some("pt-BR"));
    }

    #[test]
    fn locale_chain_walks_ancestors_then_base() {
        assert_eq!(locale_chain(Some("de-CH"), "en"), vec!["de-CH", "de", "en"]);
        assert_eq!(
            locale_chain(Some("zh-Hant-TW"), "en"),
            vec!["zh-Hant-TW", "zh-Hant", "zh", "en"]
        );
        assert_eq!(locale_chain(Some("de"), "de"), vec!["de"]);
        assert_eq!(locale_chain(Some("DE-ch"), "DE"), vec!["de-CH", "de"]);
        assert_eq!(locale_chain(Some("not valid!"), "fr"), vec!["fr"]);
        assert_eq!(locale_chain(None, "bogus!"), vec!["en"]);
    }

    proptest! {
        #[test]
        fn canonical_tags_are_fixed_points(tag in "[a-zA-Z]{2,3}(-[a-zA-Z]{4})?(-([a-zA-Z]{2}|[0-9]{3}))?") {
            let canonical = canonicalize_locale(&tag).expect("well-formed");
            prop_assert_eq!(canonicalize_locale(&canonical), Some(canonical.clone()));
            prop_assert!(canonical.eq_ignore_ascii_case(&tag));
        }

        #[test]
        fn chains_end_with_the_base_and_never_repeat(tag in "\\PC{0,20}") {
            let chain = locale_chain(Some(&tag), "en");
            prop_assert_eq!(chain.last().map(String::as_str), Some("en"));
            let mut seen = std::collections::HashSet::new();
            prop_assert!(chain.iter().all(|t| seen.insert(t.clone())));
        }
    }
}
