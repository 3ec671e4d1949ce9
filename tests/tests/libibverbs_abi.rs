//! uroce's `libibverbs.so.1` against rdma-core 44's ABI: every struct the
//! library fills or reads has the size and field offsets of
//! `<infiniband/verbs.h>` (a C program compiled against the real header
//! says them), and every (symbol, version) the system's library exports is
//! exported by ours.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{c_char, CStr, CString};
use std::path::Path;
use std::process::Command;
use uroce_tests::ibverbs::{library, require, system_library};

/// The layout the library was built with (`uroce_ibverbs_layout`), as
/// `(struct, field or "=", value)`.
fn built_layout(lib: &Path) -> Vec<(String, String, usize)> {
    let path = CString::new(lib.as_os_str().as_encoded_bytes()).expect("a path without NUL");
    // SAFETY: dlopen of uroce's library: it has no constructors, and only
    // its layout function is called (it returns a static C string).
    let text = unsafe {
        let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        assert!(!handle.is_null(), "dlopen {}", lib.display());
        let sym = libc::dlsym(handle, c"uroce_ibverbs_layout".as_ptr());
        assert!(!sym.is_null(), "uroce_ibverbs_layout is exported");
        let f: extern "C" fn() -> *const c_char = std::mem::transmute(sym);
        CStr::from_ptr(f()).to_string_lossy().into_owned()
    };
    text.lines()
        .map(|line| {
            let (head, value) = line.rsplit_once(' ').expect("`... value`");
            let value = value.parse().expect("a number");
            match head.strip_suffix(" =") {
                Some(ty) => (ty.to_string(), "=".to_string(), value),
                None => {
                    let (ty, field) = head.split_once(' ').expect("`struct field`");
                    (ty.to_string(), field.replace(' ', ""), value)
                }
            }
        })
        .collect()
}

/// The C name of a Rust field (`priv_` → `priv`, `type_` → `type`).
fn c_field(field: &str) -> String {
    field
        .split('.')
        .map(|part| part.strip_suffix('_').unwrap_or(part))
        .collect::<Vec<_>>()
        .join(".")
}

#[test]
fn struct_layouts_match_the_real_header() {
    let test = "struct_layouts_match_the_real_header";
    let header = Path::new("/usr/include/infiniband/verbs.h");
    if !require(test, header.exists(), "no /usr/include/infiniband/verbs.h (libibverbs-dev)")
        || !require(test, uroce_tests::ibverbs::tool("gcc").is_some(), "no gcc")
    {
        return;
    }
    let lib = library().expect("cargo builds libibverbs.so beside the tests");
    let ours = built_layout(&lib);
    let structs: BTreeSet<&str> = ours.iter().map(|(ty, _, _)| ty.as_str()).collect();
    assert!(structs.len() >= 25, "the layout table covers the structs: {structs:?}");

    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/verbs.h>\nint main(void) {\n",
    );
    for (ty, field, _) in &ours {
        if field == "=" {
            c += &format!("  printf(\"{ty} = %zu\\n\", sizeof(struct {ty}));\n");
        } else {
            let cf = c_field(field);
            c += &format!("  printf(\"{ty} {field} %zu\\n\", offsetof(struct {ty}, {cf}));\n");
        }
    }
    c += "  return 0;\n}\n";
    let dir = tempfile::tempdir().expect("a temporary directory");
    let source = dir.path().join("layout.c");
    let binary = dir.path().join("layout");
    std::fs::write(&source, c).expect("write the C program");
    let built = Command::new("gcc").arg("-o").arg(&binary).arg(&source).output().expect("run gcc");
    assert!(built.status.success(), "gcc: {}", String::from_utf8_lossy(&built.stderr));
    let run = Command::new(&binary).output().expect("run the C program");
    let theirs: BTreeMap<String, usize> = String::from_utf8_lossy(&run.stdout)
        .lines()
        .map(|line| {
            let (head, value) = line.rsplit_once(' ').expect("`... value`");
            (head.to_string(), value.parse().expect("a number"))
        })
        .collect();
    let mut wrong = Vec::new();
    for (ty, field, value) in &ours {
        let key = if field == "=" { format!("{ty} =") } else { format!("{ty} {field}") };
        if theirs.get(&key) != Some(value) {
            wrong.push(format!("{key}: ours {value}, verbs.h {:?}", theirs.get(&key)));
        }
    }
    assert!(wrong.is_empty(), "layouts differ from <infiniband/verbs.h>:\n{}", wrong.join("\n"));
    eprintln!("{} sizes and offsets of {} structs match verbs.h", ours.len(), structs.len());
}

/// The defined, versioned dynamic symbols of a shared object
/// (`name@VERSION` or `name@@VERSION`).
fn exports(lib: &Path) -> BTreeSet<String> {
    let out =
        Command::new("readelf").args(["--dyn-syms", "-W"]).arg(lib).output().expect("readelf");
    assert!(out.status.success(), "readelf {}", lib.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            (f.len() >= 8 && f[6] != "UND" && f[7].contains('@')).then(|| f[7].to_string())
        })
        .collect()
}

#[test]
fn every_versioned_symbol_of_the_system_library_is_exported() {
    let test = "every_versioned_symbol_of_the_system_library_is_exported";
    let system = system_library();
    if !require(test, system.is_some(), "no system libibverbs.so.1 (libibverbs1)")
        || !require(test, uroce_tests::ibverbs::tool("readelf").is_some(), "no readelf (binutils)")
    {
        return;
    }
    let theirs = exports(&system.expect("checked"));
    let ours = exports(&library().expect("cargo builds libibverbs.so beside the tests"));
    assert!(theirs.len() >= 180, "the system library exports rdma-core 44's set: {}", theirs.len());
    let missing: Vec<&String> = theirs.difference(&ours).collect();
    assert!(missing.is_empty(), "not exported by uroce's library: {missing:?}");
    // The two versions of a name are two symbols, the 1.1 one the default.
    for pair in ["ibv_get_device_list@IBVERBS_1.0", "ibv_get_device_list@@IBVERBS_1.1"] {
        assert!(ours.contains(pair), "{pair}");
    }
    let extra: Vec<&String> = ours.difference(&theirs).collect();
    assert_eq!(
        extra,
        [
            "uroce_ibverbs_layout@@IBVERBS_PRIVATE_34",
            // For uroce's librdmacm (docs/rdmacm.md), in a node of their own.
            "uroce_private_cm_event_fd@@UROCE_PRIVATE_1",
            "uroce_private_device_command@@UROCE_PRIVATE_1",
        ],
        "only uroce's own extra"
    );
}

#[test]
fn the_library_is_named_libibverbs_so_1() {
    let test = "the_library_is_named_libibverbs_so_1";
    if !require(test, uroce_tests::ibverbs::tool("readelf").is_some(), "no readelf (binutils)") {
        return;
    }
    let lib = library().expect("cargo builds libibverbs.so beside the tests");
    let out = Command::new("readelf").arg("-d").arg(&lib).output().expect("readelf -d");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Library soname: [libibverbs.so.1]"), "{text}");
}
