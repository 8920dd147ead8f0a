//! Who may see an app's Help, Skills and catalogue entries.

use super::entry::AppNav;
use crate::auth::{AuthUser, Profile};

/// The roles an app admits: its navigation's `requiresRoles` when declared (an empty list admits
/// nobody), `["admin"]` for an app reached only through the admin area (an `adminHref` and no
/// `href` of its own), else `None`, which admits every signed-in person.
pub fn app_audience_roles(nav: Option<&AppNav>) -> Option<Vec<String>> {
    let nav = nav?;
    if let Some(roles) = &nav.requires_roles {
        return Some(roles.clone());
    }
    let admin_only =
        nav.href.is_empty() && nav.admin_href.as_deref().is_some_and(|h| !h.is_empty());
    admin_only.then(|| vec!["admin".to_string()])
}

/// Whether `user` holds one of `roles`: no roles admit everyone; `guest` matches the guest
/// profile; any other name must be one of the person's roles.
pub fn has_any_app_role(user: Option<&AuthUser>, roles: Option<&[String]>) -> bool {
    let Some(roles) = roles else {
        return true;
    };
    let Some(user) = user else {
        return false;
    };
    roles.iter().any(|role| {
        if role == "guest" {
            user.profile == Profile::Guest
        } else {
            user.roles.iter().any(|held| held.as_str() == role)
        }
    })
}

/// Whether a person may see an app's Help (and Skills): only people do (no person, no
/// visibility), and only those its audience admits.
pub fn can_see_app(nav: Option<&AppNav>, person: Option<&AuthUser>) -> bool {
    person.is_some() && has_any_app_role(person, app_audience_roles(nav).as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{Provider, Role, build_roles};
    use crate::registry::entry::NavSection;
    use serde_json::json;

    fn person(profile: Profile, admin: bool) -> AuthUser {
        AuthUser {
            id: uuid::Uuid::new_v4(),
            uid: "someone".into(),
            provider: Provider::Local,
            profile,
            display_name: None,
            roles: build_roles(Provider::Local, profile, admin, false),
        }
    }

    fn nav(value: serde_json::Value) -> AppNav {
        serde_json::from_value(value).expect("nav")
    }

    /// The visibility truth table of the Help spec: columns anonymous, guest, user, admin.
    #[test]
    fn help_visibility_truth_table() {
        let guest = person(Profile::Guest, false);
        let user = person(Profile::User, false);
        let admin = person(Profile::User, true);
        assert!(admin.has_role(Role::Admin));
        let rows: Vec<(Option<AppNav>, [bool; 4])> = vec![
            (None, [false, true, true, true]),
            (
                Some(nav(
                    json!({"href": "/app/x", "section": "more", "requiresAuth": true}),
                )),
                [false, true, true, true],
            ),
            (
                Some(nav(
                    json!({"href": "/app/x", "section": "more", "requiresRoles": ["user"]}),
                )),
                [false, false, true, true],
            ),
            (
                Some(nav(
                    json!({"href": "/app/x", "section": "more", "requiresRoles": ["user", "guest"]}),
                )),
                [false, true, true, true],
            ),
            (
                Some(nav(
                    json!({"href": "", "section": "hidden", "requiresRoles": ["admin"]}),
                )),
                [false, false, false, true],
            ),
            (
                Some(nav(
                    json!({"href": "", "section": "hidden", "adminHref": "/admin/x"}),
                )),
                [false, false, false, true],
            ),
        ];
        for (nav, expected) in rows {
            let actual = [
                can_see_app(nav.as_ref(), None),
                can_see_app(nav.as_ref(), Some(&guest)),
                can_see_app(nav.as_ref(), Some(&user)),
                can_see_app(nav.as_ref(), Some(&admin)),
            ];
            assert_eq!(actual, expected, "{nav:?}");
        }
    }

    #[test]
    fn audience_roles_rules() {
        assert_eq!(app_audience_roles(None), None);
        let empty = nav(json!({"href": "/x", "section": "more", "requiresRoles": []}));
        assert_eq!(app_audience_roles(Some(&empty)), Some(vec![]));
        // An empty list admits nobody, not everybody.
        assert!(!can_see_app(
            Some(&empty),
            Some(&person(Profile::User, true))
        ));
        let hidden = AppNav {
            href: "/x".into(),
            match_prefix: None,
            section: NavSection::Hidden,
            requires_auth: None,
            requires_roles: None,
            badge: None,
            admin_href: Some("/admin/x".into()),
        };
        assert_eq!(
            app_audience_roles(Some(&hidden)),
            None,
            "an own href keeps it open"
        );
    }

    #[test]
    fn unknown_role_names_never_match() {
        let admin = person(Profile::User, true);
        assert!(!has_any_app_role(Some(&admin), Some(&["root".to_string()])));
        assert!(has_any_app_role(None, None));
        assert!(!has_any_app_role(None, Some(&["user".to_string()])));
    }
}
