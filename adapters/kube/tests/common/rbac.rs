//! The RBAC of `deploy/rbac.yaml`, as the API server's authorizer applies it, for the fake API
//! server ([`super::apiserver`]) to enforce, and the proof that each of its permissions is
//! needed.
//!
//! A [`Policy`] is the rules bound to service accounts: a ClusterRole through a
//! ClusterRoleBinding grants everywhere, a Role through a RoleBinding in its namespace only.
//! A rule allows a request when its API groups, resources (`plural` or `plural/subresource`),
//! verbs and, if it has any, resource names all match (`*` matching anything).
//!
//! A [`Permission`] is one verb on one resource of one group in one rule: the finest thing a
//! reviewer can remove. [`Policy::needed_by`] says, for each, which recorded requests only it
//! allows: the requests that a policy without it refuses (403), failing the test that made
//! them, since every test over the fake checks that no request was refused.

use serde_json::Value;

/// One rule of a role, bound to a subject.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// `system:serviceaccount:<namespace>:<name>`.
    pub user: String,
    /// `None`: cluster-wide (a ClusterRole bound by a ClusterRoleBinding).
    pub namespace: Option<String>,
    /// Where it comes from: `ClusterRole/name rule 3`.
    pub origin: String,
    /// `apiGroups`.
    pub groups: Vec<String>,
    /// `resources`.
    pub resources: Vec<String>,
    /// `verbs`.
    pub verbs: Vec<String>,
    /// `resourceNames` (empty: any).
    pub names: Vec<String>,
}

/// One verb on one resource of one group, in one grant.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Permission {
    /// The grant's index in [`Policy::grants`].
    pub grant: usize,
    /// The API group.
    pub group: String,
    /// The resource.
    pub resource: String,
    /// The verb.
    pub verb: String,
}

impl std::fmt::Display for Permission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        write!(
            f,
            "{} {}/{} (grant {})",
            self.verb, group, self.resource, self.grant
        )
    }
}

/// What a request asks.
#[derive(Clone, Debug)]
pub struct Attributes<'a> {
    /// Who.
    pub user: &'a str,
    /// The verb.
    pub verb: &'a str,
    /// The group.
    pub group: &'a str,
    /// `plural[/subresource]`.
    pub resource: &'a str,
    /// The namespace, if the request is namespaced.
    pub namespace: Option<&'a str>,
    /// The object's name, if one.
    pub name: Option<&'a str>,
}

impl Attributes<'_> {
    /// The API server's message for a refusal.
    pub fn forbidden_message(&self) -> String {
        let (plural, _) = self.resource.split_once('/').unwrap_or((self.resource, ""));
        let what = if self.group.is_empty() {
            plural.to_owned()
        } else {
            format!("{plural}.{}", self.group)
        };
        let named = self.name.map(|n| format!(" \"{n}\"")).unwrap_or_default();
        let scope = match self.namespace {
            Some(ns) => format!(" in the namespace \"{ns}\""),
            None => " at the cluster scope".to_owned(),
        };
        format!(
            "{what}{named} is forbidden: User \"{}\" cannot {} resource \"{}\" in API group \"{}\"{scope}",
            self.user, self.verb, self.resource, self.group
        )
    }
}

/// The rules of a set of manifests, bound to their subjects.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    /// Every grant, in the manifests' order.
    pub grants: Vec<Grant>,
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

fn matches(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == "*" || v == value)
}

impl Policy {
    /// The policy of `yaml` (several documents): every role's rules for every service account
    /// bound to it.
    pub fn parse(yaml: &str) -> Policy {
        let documents: Vec<Value> = serde_saphyr::from_multiple(yaml).expect("RBAC manifests");
        let role = |kind: &str, name: &str, namespace: Option<&str>| {
            documents.iter().find(|d| {
                d["kind"] == kind
                    && d["metadata"]["name"] == name
                    && namespace.is_none_or(|ns| d["metadata"]["namespace"] == ns)
            })
        };
        let mut grants = Vec::new();
        for binding in &documents {
            let (role_kind, namespace) = match binding["kind"].as_str() {
                Some("ClusterRoleBinding") => ("ClusterRole", None),
                Some("RoleBinding") => (
                    binding["roleRef"]["kind"].as_str().unwrap_or("Role"),
                    binding["metadata"]["namespace"].as_str(),
                ),
                _ => continue,
            };
            let role_name = binding["roleRef"]["name"].as_str().expect("a roleRef");
            let lookup_ns = (role_kind == "Role").then_some(namespace).flatten();
            let role = role(role_kind, role_name, lookup_ns)
                .unwrap_or_else(|| panic!("{role_kind} {role_name} is not in the manifests"));
            for subject in binding["subjects"].as_array().into_iter().flatten() {
                if subject["kind"] != "ServiceAccount" {
                    continue;
                }
                let user = format!(
                    "system:serviceaccount:{}:{}",
                    subject["namespace"].as_str().unwrap_or("default"),
                    subject["name"].as_str().expect("a subject name")
                );
                for (i, rule) in role["rules"].as_array().into_iter().flatten().enumerate() {
                    grants.push(Grant {
                        user: user.clone(),
                        namespace: namespace.map(str::to_owned),
                        origin: format!("{role_kind}/{role_name} rule {}", i + 1),
                        groups: strings(&rule["apiGroups"]),
                        resources: strings(&rule["resources"]),
                        verbs: strings(&rule["verbs"]),
                        names: strings(&rule["resourceNames"]),
                    });
                }
            }
        }
        Policy { grants }
    }

    /// `deploy/rbac.yaml`.
    pub fn deployed() -> Policy {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/rbac.yaml");
        Policy::parse(&std::fs::read_to_string(path).expect("deploy/rbac.yaml"))
    }

    /// Whether some grant allows the request.
    pub fn allows(&self, a: &Attributes) -> bool {
        self.grants.iter().any(|g| {
            g.user == a.user
                && g.namespace
                    .as_deref()
                    .is_none_or(|ns| a.namespace == Some(ns))
                && matches(&g.groups, a.group)
                && matches(&g.resources, a.resource)
                && matches(&g.verbs, a.verb)
                && (g.names.is_empty() || a.name.is_some_and(|n| matches(&g.names, n)))
        })
    }

    /// Every permission, one per verb per resource per group of each grant.
    pub fn permissions(&self) -> Vec<Permission> {
        let mut out = Vec::new();
        for (i, g) in self.grants.iter().enumerate() {
            for group in &g.groups {
                for resource in &g.resources {
                    for verb in &g.verbs {
                        out.push(Permission {
                            grant: i,
                            group: group.clone(),
                            resource: resource.clone(),
                            verb: verb.clone(),
                        });
                    }
                }
            }
        }
        out
    }

    /// This policy without `permission` (its grant split so that everything else stays).
    pub fn without(&self, permission: &Permission) -> Policy {
        let mut grants = Vec::new();
        for (i, g) in self.grants.iter().enumerate() {
            if i != permission.grant {
                grants.push(g.clone());
                continue;
            }
            for group in &g.groups {
                for resource in &g.resources {
                    let verbs: Vec<String> = g
                        .verbs
                        .iter()
                        .filter(|v| {
                            !(*group == permission.group
                                && *resource == permission.resource
                                && **v == permission.verb)
                        })
                        .cloned()
                        .collect();
                    if !verbs.is_empty() {
                        grants.push(Grant {
                            groups: vec![group.clone()],
                            resources: vec![resource.clone()],
                            verbs,
                            ..g.clone()
                        });
                    }
                }
            }
        }
        Policy { grants }
    }
}
