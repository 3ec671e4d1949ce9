//! Links the library as rdma-core's `librdmacm.so.1`: its soname and the
//! version nodes of its 68 exported names (`librdmacm.map`). The verbs it
//! calls are resolved at load time in whichever `libibverbs.so.1` the
//! process has (`src/verbs.rs` links against `libibverbs.so.1` by name, for
//! the `NEEDED` entry and the symbol versions).
//!
//! The library linked against is not the system's (a fresh machine has
//! none: rdma-core is not installed) but a stub made here, with the soname
//! `libibverbs.so.1`, that defines exactly the verbs `src/verbs.rs`
//! declares, each at the default version uroce's own `libibverbs.so.1`
//! exports it under (read from `../ibverbs/src/exports.rs` and
//! `../ibverbs/libibverbs.map`, where those versions are written once). It
//! is built with the same `rustc`, so the build needs nothing beyond the
//! Rust toolchain. Only the link reads it: its file is named
//! `liburoce_libibverbs_link_stub.so`, never `libibverbs.so.1`, so that no
//! program finds it at run time (Cargo puts this directory on the library
//! path of the programs it runs, tests included).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let dir = PathBuf::from(env("CARGO_MANIFEST_DIR"));
    let map = dir.join("librdmacm.map");
    println!("cargo:rerun-if-changed=librdmacm.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librdmacm.so.1");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={}", map.display());

    let verbs_rs = dir.join("src/verbs.rs");
    let exports_rs = dir.join("../ibverbs/src/exports.rs");
    let ibverbs_map = dir.join("../ibverbs/libibverbs.map");
    for input in [&verbs_rs, &exports_rs, &ibverbs_map] {
        println!("cargo:rerun-if-changed={}", input.display());
    }
    let names = imported_verbs(&read(&verbs_rs));
    let (exports_text, map_text) = (read(&exports_rs), read(&ibverbs_map));
    let versions = default_versions(&exports_text, &map_text);
    let mut by_version: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for name in &names {
        let version = versions.get(name.as_str()).unwrap_or_else(|| {
            panic!(
                "{name}: src/verbs.rs declares it, but uroce's libibverbs.so.1 does not export it"
            )
        });
        by_version.entry(version).or_default().push(name);
    }

    let out = PathBuf::from(env("OUT_DIR"));
    let stub_rs = out.join("libibverbs_stub.rs");
    let stub_map = out.join("libibverbs_stub.map");
    std::fs::write(&stub_rs, stub_source(&names)).expect("write the stub's source");
    std::fs::write(&stub_map, stub_version_script(&by_version)).expect("write the stub's map");
    build_stub(&stub_rs, &stub_map, &out.join("liburoce_libibverbs_link_stub.so"));
    println!("cargo:rustc-link-search=native={}", out.display());
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("cargo sets {name}"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The names of the `pub fn ibv_*` declarations in `src/verbs.rs`'s
/// `extern "C"` block.
fn imported_verbs(source: &str) -> Vec<String> {
    let start = source.find("extern \"C\" {").expect("src/verbs.rs has an extern \"C\" block");
    let block = &source[start..];
    let block = &block[..block.find("\n}").expect("the extern block ends")];
    block
        .split("pub fn ")
        .skip(1)
        .filter_map(|rest| rest.split('(').next())
        .map(str::trim)
        .filter(|name| name.starts_with("ibv_"))
        .map(String::from)
        .collect()
}

/// Every name uroce's `libibverbs.so.1` exports, with its default version:
/// the `@@` bindings of `exports.rs`, else the map's node that lists it.
fn default_versions<'a>(exports_rs: &'a str, map: &'a str) -> BTreeMap<&'a str, &'a str> {
    let mut versions = BTreeMap::new();
    let mut node = None;
    for line in map.lines().map(str::trim) {
        if let Some(open) = line.strip_suffix('{') {
            node = Some(open.trim());
        } else if line.starts_with('}') {
            node = None;
        } else if let (Some(node), Some(name)) = (node, line.strip_suffix(';')) {
            if !name.contains(':') && !name.contains('*') {
                versions.insert(name.trim(), node);
            }
        }
    }
    for line in exports_rs.lines().map(str::trim) {
        let quoted: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
        if let [name, "@@", version, ..] = quoted[..] {
            versions.insert(name, version);
        }
    }
    versions
}

/// Each name as an empty function, defined in assembly so that rustc's own
/// version script (for `#[no_mangle]` names) does not claim it.
fn stub_source(names: &[String]) -> String {
    let mut s = String::from(
        "#![no_std]\n\
         #[panic_handler]\n\
         fn panic(_: &core::panic::PanicInfo) -> ! { loop {} }\n",
    );
    for name in names {
        s.push_str(&format!(
            "core::arch::global_asm!(\".globl {name}\", \".type {name}, @function\", \"{name}: ret\");\n"
        ));
    }
    s
}

fn stub_version_script(by_version: &BTreeMap<&str, Vec<&str>>) -> String {
    let mut s = String::new();
    for (version, names) in by_version {
        s.push_str(&format!("{version} {{\n\tglobal:\n"));
        for name in names {
            s.push_str(&format!("\t\t{name};\n"));
        }
        s.push_str("};\n");
    }
    s
}

fn build_stub(source: &Path, map: &Path, output: &Path) {
    let mut rustc = Command::new(env("RUSTC"));
    rustc
        .args(["--crate-type", "cdylib", "--crate-name", "libibverbs_link_stub"])
        .args(["--edition", "2021", "-C", "panic=abort", "-C", "opt-level=0"])
        .args(["--target", &env("TARGET")])
        .arg("-C")
        .arg("link-arg=-Wl,-soname,libibverbs.so.1")
        .arg("-C")
        .arg(format!("link-arg=-Wl,--version-script={}", map.display()))
        .arg("-o")
        .arg(output)
        .arg(source);
    if let Ok(linker) = std::env::var("RUSTC_LINKER") {
        rustc.arg("-C").arg(format!("linker={linker}"));
    }
    let status = rustc.status().expect("run rustc for the libibverbs.so.1 link stub");
    assert!(status.success(), "rustc could not build the libibverbs.so.1 link stub: {status}");
}
