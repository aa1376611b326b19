use super::*;
use crate::serviceentry::fixtures::static_http_entry as se;
use crate::serviceentry::validate::Valid;

/// `name=ip` of every served object (invalid ones show their last valid version, or `-`).
fn served(d: &Directory) -> Vec<String> {
    d.entries()
        .map(|e| match e.valid.as_deref() {
            Some(Valid::ServiceEntry(se)) => {
                let ip = se.endpoints.first().map_or("none", |w| w.address.as_str());
                format!("{}={ip}", e.key.name)
            }
            _ => format!("{}=-", e.key.name),
        })
        .collect()
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

#[test]
fn multi_document_files_in_path_order_other_files_ignored() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write(
        d,
        "b.yaml",
        &format!("{}---\n{}", se("b1", "10.0.0.1"), se("b2", "10.0.0.2")),
    );
    write(d, "a.yml", &se("a", "10.0.0.3"));
    write(
        d,
        "c.json",
        "{\"apiVersion\": \"networking.istio.io/v1\", \"kind\": \"ServiceEntry\", \"metadata\": {\"name\": \"c\"}, \"spec\": {\"hosts\": [\"c.example.com\"], \"ports\": [{\"number\": 80, \"name\": \"http\"}]}}",
    );
    write(d, "notes.txt", "not a manifest");
    write(d, ".hidden.yaml", &se("hidden", "10.0.0.9"));
    std::fs::create_dir(d.join("sub")).unwrap();
    write(&d.join("sub"), "s.yaml", &se("sub", "10.0.0.8"));
    let mut dir = Directory::new(d.to_path_buf(), "default".into());
    dir.rescan();
    assert_eq!(
        served(&dir)[..3],
        ["a=10.0.0.3", "b1=10.0.0.1", "b2=10.0.0.2"]
    );
    assert_eq!(dir.entries().count(), 4, "a, b1, b2, c");
    let b2 = dir.entries().nth(2).unwrap();
    assert_eq!(
        b2.place.to_string(),
        format!("{}:12", d.join("b.yaml").display())
    );
    assert!(dir.rejections().is_empty() && dir.problem().is_none());
}

#[test]
fn edit_add_delete() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write(d, "a.yaml", &se("a", "10.0.0.1"));
    let mut dir = Directory::new(d.to_path_buf(), "default".into());
    dir.rescan();
    write(d, "a.yaml", &se("a", "10.0.0.2"));
    write(d, "b.yaml", &se("b", "10.0.0.3"));
    dir.rescan();
    assert_eq!(served(&dir), ["a=10.0.0.2", "b=10.0.0.3"]);
    std::fs::remove_file(d.join("a.yaml")).unwrap();
    dir.rescan();
    assert_eq!(served(&dir), ["b=10.0.0.3"]);
}

#[test]
fn a_half_written_file_keeps_its_last_readable_version() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let full = format!("{}---\n{}", se("a", "10.0.0.1"), se("b", "10.0.0.2"));
    write(d, "m.yaml", &full);
    let mut dir = Directory::new(d.to_path_buf(), "default".into());
    dir.rescan();
    // Caught mid-write: the second document is cut inside a flow sequence.
    let cut = &full[..full.find("endpoints: [{address: 10.0.0.2").unwrap() + 15];
    write(d, "m.yaml", cut);
    dir.rescan();
    assert_eq!(
        served(&dir),
        ["a=10.0.0.1", "b=10.0.0.2"],
        "the whole file's last good objects"
    );
    let r = dir.rejections();
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0].object, format!("file {}", d.join("m.yaml").display()));
    assert!(
        r[0].source
            .starts_with(&format!("{}:", d.join("m.yaml").display())),
        "{r:?}"
    );
    assert!(
        r[0].serving_previous && r[0].message.contains("still served"),
        "{r:?}"
    );
    // Finished writing: read normally again.
    write(d, "m.yaml", &full.replace("10.0.0.2", "10.0.0.7"));
    dir.rescan();
    assert_eq!(served(&dir), ["a=10.0.0.1", "b=10.0.0.7"]);
    assert!(dir.rejections().is_empty());
}

#[test]
fn an_object_that_becomes_invalid_keeps_its_last_valid_version() {
    // REG-11
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write(
        d,
        "m.yaml",
        &format!("{}---\n{}", se("a", "10.0.0.1"), se("b", "10.0.0.2")),
    );
    let mut dir = Directory::new(d.to_path_buf(), "default".into());
    dir.rescan();
    let bad = format!("{}---\n{}", se("a", "10.0.0.5"), se("b", "api.example.com"));
    write(d, "m.yaml", &bad);
    dir.rescan();
    assert_eq!(
        served(&dir),
        ["a=10.0.0.5", "b=10.0.0.2"],
        "a updated, b kept"
    );
    let b = dir.entries().nth(1).unwrap();
    let r: Vec<_> = b.rejections().collect();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].object, "ServiceEntry shop/b");
    assert_eq!(r[0].field, "spec.endpoints[0].address");
    assert_eq!(r[0].source, format!("{}:21", d.join("m.yaml").display()));
    assert!(r[0].serving_previous);
}

#[test]
fn an_unlistable_directory_keeps_everything() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("se");
    std::fs::create_dir(&d).unwrap();
    write(&d, "a.yaml", &se("a", "10.0.0.1"));
    let mut dir = Directory::new(d.clone(), "default".into());
    dir.rescan();
    std::fs::rename(&d, tmp.path().join("away")).unwrap();
    dir.rescan();
    assert_eq!(served(&dir), ["a=10.0.0.1"], "never read as 'no files'");
    assert!(
        dir.problem().unwrap().contains("cannot list"),
        "{:?}",
        dir.problem()
    );
    std::fs::rename(tmp.path().join("away"), &d).unwrap();
    dir.rescan();
    assert!(dir.problem().is_none());
}

// REG-11: `tributary validate` reports every file's problems, each with its file (and line), and
// reads the directory as the directory source does (dot files and other endings left out).
#[test]
fn directory_problems_name_every_bad_file_and_skip_what_the_source_skips() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write(d, "good.yaml", &se("good", "10.0.0.1"));
    write(d, "bad.yaml", &se("bad", "not-an-ip"));
    write(d, "broken.yml", "kind: [\n");
    write(d, ".hidden.yaml", "kind: [\n");
    write(d, "notes.txt", "kind: [\n");
    let config = ServiceEntryConfig {
        directory: Some(d.to_path_buf()),
        ..ServiceEntryConfig::default()
    };
    let problems = directory_problems(&config);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].contains("bad.yaml") && problems[0].contains("spec.endpoints[0].address"),
        "{problems:?}"
    );
    let broken = format!("{}:", d.join("broken.yml").display());
    assert!(problems[1].starts_with(&broken), "{problems:?}");

    let missing = ServiceEntryConfig {
        directory: Some(d.join("missing")),
        ..ServiceEntryConfig::default()
    };
    let problems = directory_problems(&missing);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("missing"), "{problems:?}");
}
