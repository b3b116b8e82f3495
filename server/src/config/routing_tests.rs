use super::*;
use crate::config::FileConfig;

fn file(text: &str) -> FileConfig {
    toml::from_str(text).unwrap()
}

fn resolve(text: &str) -> Result<Routing, String> {
    let f = file(text);
    let default = crate::config::resolve_provider(Default::default(), &f.provider)
        .map_err(|e| e.to_string())?;
    crate::config::resolve_routing(default.as_ref(), &f).map_err(|e| e.to_string())
}

const TWO: &str = r#"
[providers.local]
base_url = "http://127.0.0.1:8080/v1"
model = "gemma"
[[providers.local.models]]
name = "gemma"
context = 8192
tools = true
cost = "free"

[providers.remote]
base_url = "http://127.0.0.1:9090/v1/"
api_key_env = "HUNKGATE_TEST_ROUTING_KEY_UNSET"
[[providers.remote.models]]
name = "big"
context = 128000
cost = "expensive"
"#;

/// `[providers.*]` read with their models, `[routing]`'s defaults, and the mode's names.
#[test]
fn named_providers_and_routing_are_read_with_defaults() {
    let r = resolve(TWO).unwrap();
    let names: Vec<&str> = r.providers.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["local", "remote"]);
    let local = r.provider("local").unwrap();
    assert_eq!(local.cfg.model, "gemma");
    assert_eq!(
        local.models,
        [ModelMeta {
            name: "gemma".into(),
            context: Some(8192),
            tools: Some(true),
            cost: Some(CostClass::Free),
        }]
    );
    assert!(local.discover);
    assert_eq!(
        r.provider("remote").unwrap().cfg.base_url,
        "http://127.0.0.1:9090/v1"
    );
    assert_eq!(r.mode, None);
    assert_eq!(r.prefer, Prefer::Cheap);
    assert_eq!(r.triggers, Triggers::default());
    assert_eq!(
        (r.local_name(), r.remote_name()),
        (Some("local"), Some("remote"))
    );
    assert!(r.check_mode(AgentMode::HybridAuto).is_ok());

    let r = resolve(&format!(
        "{TWO}\n[routing]\nagent_mode = \"hybrid_auto\"\nprefer = \"capable\"\nhybrid_remote_on_schema_fail = 0\nhybrid_remote_on_timeout_ms = 0\nhybrid_remote_on_budget_exhausted = false\n"
    ))
    .unwrap();
    assert_eq!(r.mode, Some(AgentMode::HybridAuto));
    assert_eq!(r.prefer, Prefer::Capable);
    assert_eq!(
        r.triggers,
        Triggers {
            budget_exhausted: false,
            schema_fail: 0,
            context_overflow: true,
            local_timeout: None,
        }
    );
}

/// `[provider]` is the provider named `default`, first, and the local one when none is
/// named `local`.
#[test]
fn the_old_provider_table_is_the_default_provider() {
    let r = resolve("[provider]\nbase_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\n").unwrap();
    assert_eq!(r.providers.len(), 1);
    assert_eq!(r.providers[0].name, DEFAULT_PROVIDER);
    assert_eq!(r.local_name(), Some(DEFAULT_PROVIDER));
    assert_eq!(r.remote_name(), None);
    let e = r.check_mode(AgentMode::HybridAuto).unwrap_err();
    assert!(e.contains("needs a remote provider"), "{e}");
    assert!(resolve("").unwrap().providers.is_empty());
}

/// Mistakes are errors naming the table and what is wrong; a positive control beside each.
#[test]
fn bad_routing_settings_are_clear_errors() {
    let err = |text: &str| resolve(text).unwrap_err();
    let e = err("[providers.local]\nmodel = \"m\"\n");
    assert!(
        e.contains("[providers.local]") && e.contains("base_url"),
        "{e}"
    );
    let e = err("[providers.local]\nbase_url = \"ftp://x\"\n");
    assert!(
        e.contains("[providers.local]") && e.contains("http://"),
        "{e}"
    );
    let e = err("[providers.default]\nbase_url = \"http://x/v1\"\n");
    assert!(e.contains("[provider]'s"), "{e}");
    let e = err("[providers.\"a b\"]\nbase_url = \"http://x/v1\"\n");
    assert!(e.contains("letters, digits"), "{e}");
    let e = err(&format!("{TWO}\n[routing]\nagent_mode = \"fast\"\n"));
    assert!(e.contains("local, remote, hybrid_auto"), "{e}");
    let e = err(&format!("{TWO}\n[routing]\nremote = \"cloud\"\n"));
    assert!(e.contains("\"cloud\"") && e.contains("no provider"), "{e}");
    let e = err(
        "[providers.local]\nbase_url = \"http://x/v1\"\n[routing]\nagent_mode = \"hybrid_auto\"\n",
    );
    assert!(e.contains("needs a remote provider"), "{e}");
    let e = err(&format!(
        "{TWO}\n[routing]\nagent_mode = \"hybrid_auto\"\nremote = \"local\"\n"
    ));
    assert!(e.contains("both \"local\""), "{e}");
    assert!(toml::from_str::<FileConfig>("[routing]\nprefer = \"fastest\"\n").is_err());
    assert!(
        toml::from_str::<FileConfig>("[[provider.models]]\nname = \"m\"\ncost = \"gratis\"\n")
            .is_err()
    );
    assert!(toml::from_str::<FileConfig>("[routing]\nmode = \"local\"\n").is_err());
    assert!(resolve(&format!("{TWO}\n[routing]\nagent_mode = \"remote\"\n")).is_ok());
}

/// The config's facts win field by field; the server fills gaps and adds its other models;
/// the provider's default model is a candidate even when no list names it.
#[test]
fn config_models_win_over_the_servers() {
    let meta = |name: &str, context, tools, cost| ModelMeta {
        name: name.into(),
        context,
        tools,
        cost,
    };
    let config = [meta("a", Some(1000), None, Some(CostClass::Free))];
    let server = [
        meta("a", Some(32768), Some(true), None),
        meta("b", Some(4096), None, None),
    ];
    assert_eq!(
        merge_models(&config, &server, "c"),
        [
            meta("a", Some(1000), Some(true), Some(CostClass::Free)),
            meta("b", Some(4096), None, None),
            meta("c", None, None, None),
        ]
    );
    assert_eq!(merge_models(&[], &[], ""), []);
    assert_eq!(merge_models(&config, &[], "a"), config);
}
