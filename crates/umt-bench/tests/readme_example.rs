//! The repository README's "Add it to your project" example is umt-rt's crate README example,
//! which runs as a doc test of umt-rt: the two stay the same.

fn first_rust_block(text: &str, after: &str) -> String {
    let from = text.find(after).unwrap_or_else(|| panic!("no {after:?}"));
    let rest = &text[from..];
    let start = rest.find("```rust\n").expect("a rust block") + "```rust\n".len();
    let len = rest[start..].find("```").expect("the block's end");
    rest[start..start + len].to_string()
}

#[test]
fn the_readme_example_is_the_doc_tested_one() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = std::fs::read_to_string(dir.join("../../README.md")).unwrap();
    let krate = std::fs::read_to_string(dir.join("../umt-rt/README.md")).unwrap();
    assert_eq!(
        first_rust_block(&root, "## Add it to your project"),
        first_rust_block(&krate, "## Add it to your project"),
        "README.md and crates/umt-rt/README.md show different examples"
    );
}
