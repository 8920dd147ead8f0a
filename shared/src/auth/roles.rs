//! Roles of a person: derived from the account's provider and profile, administrator status and
//! group management, never stored.

use serde::{Deserialize, Serialize};

/// Where an account comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    Local,
    Ipa,
}

/// What kind of person an account is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    User,
    Guest,
}

impl Provider {
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Local => "local",
            Provider::Ipa => "ipa",
        }
    }
    pub fn parse(value: &str) -> Option<Provider> {
        match value {
            "local" => Some(Provider::Local),
            "ipa" => Some(Provider::Ipa),
            _ => None,
        }
    }
}

impl Profile {
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::User => "user",
            Profile::Guest => "guest",
        }
    }
    pub fn parse(value: &str) -> Option<Profile> {
        match value {
            "user" => Some(Profile::User),
            "guest" => Some(Profile::Guest),
            _ => None,
        }
    }
}

/// The platform's roles, as apps name them in `requiresRoles`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Role {
    #[serde(rename = "admin")]
    Admin,
    #[serde(rename = "ipa")]
    Ipa,
    #[serde(rename = "guest")]
    Guest,
    #[serde(rename = "group-manager")]
    GroupManager,
    #[serde(rename = "local")]
    Local,
    #[serde(rename = "user")]
    User,
    #[serde(rename = "ipa/user")]
    IpaUser,
    #[serde(rename = "ipa/guest")]
    IpaGuest,
    #[serde(rename = "local/user")]
    LocalUser,
    #[serde(rename = "local/guest")]
    LocalGuest,
}

impl Role {
    pub const ALL: [Role; 10] = [
        Role::Admin,
        Role::Ipa,
        Role::Guest,
        Role::GroupManager,
        Role::Local,
        Role::User,
        Role::IpaUser,
        Role::IpaGuest,
        Role::LocalUser,
        Role::LocalGuest,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Ipa => "ipa",
            Role::Guest => "guest",
            Role::GroupManager => "group-manager",
            Role::Local => "local",
            Role::User => "user",
            Role::IpaUser => "ipa/user",
            Role::IpaGuest => "ipa/guest",
            Role::LocalUser => "local/user",
            Role::LocalGuest => "local/guest",
        }
    }

    /// The role named `value`, if it is one of the platform's roles.
    pub fn parse(value: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|role| role.as_str() == value)
    }
}

/// The roles of an account: its profile, provider and `provider/profile`; a non-guest also gets
/// `admin` when effectively an administrator and `group-manager` when managing a group.
pub fn build_roles(
    provider: Provider,
    profile: Profile,
    admin: bool,
    manages_groups: bool,
) -> Vec<Role> {
    let mut roles = vec![
        match profile {
            Profile::User => Role::User,
            Profile::Guest => Role::Guest,
        },
        match provider {
            Provider::Local => Role::Local,
            Provider::Ipa => Role::Ipa,
        },
        match (provider, profile) {
            (Provider::Ipa, Profile::User) => Role::IpaUser,
            (Provider::Ipa, Profile::Guest) => Role::IpaGuest,
            (Provider::Local, Profile::User) => Role::LocalUser,
            (Provider::Local, Profile::Guest) => Role::LocalGuest,
        },
    ];
    if profile == Profile::Guest {
        return roles;
    }
    if admin {
        roles.push(Role::Admin);
    }
    if manages_groups {
        roles.push(Role::GroupManager);
    }
    roles
}

/// The roles without `admin`: what a mobile-app session (or an invocation made from one) carries.
pub fn without_admin_role(roles: &[Role]) -> Vec<Role> {
    roles
        .iter()
        .copied()
        .filter(|r| *r != Role::Admin)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_follow_provider_profile_admin_and_groups() {
        assert_eq!(
            build_roles(Provider::Local, Profile::User, true, true),
            vec![
                Role::User,
                Role::Local,
                Role::LocalUser,
                Role::Admin,
                Role::GroupManager
            ]
        );
        assert_eq!(
            build_roles(Provider::Ipa, Profile::User, false, false),
            vec![Role::User, Role::Ipa, Role::IpaUser]
        );
        // Guests get nothing beyond their profile and provider, whatever the flags say.
        assert_eq!(
            build_roles(Provider::Ipa, Profile::Guest, true, true),
            vec![Role::Guest, Role::Ipa, Role::IpaGuest]
        );
        assert_eq!(
            build_roles(Provider::Local, Profile::Guest, false, false),
            vec![Role::Guest, Role::Local, Role::LocalGuest]
        );
    }

    #[test]
    fn without_admin_keeps_every_other_role() {
        let roles = build_roles(Provider::Local, Profile::User, true, true);
        assert_eq!(
            without_admin_role(&roles),
            vec![Role::User, Role::Local, Role::LocalUser, Role::GroupManager]
        );
    }

    #[test]
    fn role_names_round_trip() {
        for role in Role::ALL {
            assert_eq!(Role::parse(role.as_str()), Some(role));
            let json = serde_json::to_string(&role).expect("serialise");
            assert_eq!(json, format!("\"{}\"", role.as_str()));
        }
        assert_eq!(Role::parse("root"), None);
    }
}
