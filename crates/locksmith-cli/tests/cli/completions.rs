//! `locksmith completions SHELL` and `locksmith man`, through the built
//! binary (no Redis involved).

use crate::common;

use common::{run, RedisServer};

#[test]
fn completions_and_man_page_cover_the_commands() {
    // The helpers need a server for the environment; nothing connects.
    let server = RedisServer::start().unwrap();
    let bash = run(&server, &["completions", "bash"]);
    assert_eq!(bash.code, Some(0), "{bash:?}");
    for word in [
        "_locksmith",
        "run",
        "status",
        "latch",
        "--fair-lock",
        "--semaphore",
    ] {
        assert!(bash.stdout.contains(word), "bash completion lacks {word}");
    }
    let zsh = run(&server, &["completions", "zsh"]);
    assert!(zsh.stdout.starts_with("#compdef locksmith"), "{zsh:?}");
    let fish = run(&server, &["completions", "fish"]);
    assert!(fish.stdout.contains("complete -c locksmith"), "{fish:?}");
    let man = run(&server, &["man"]);
    assert_eq!(man.code, Some(0), "{man:?}");
    assert!(man.stdout.contains(".TH locksmith 1"), "{man:?}");
    for word in ["latch", "status", "unlock"] {
        assert!(man.stdout.contains(word), "man page lacks {word}");
    }
    assert_eq!(run(&server, &["completions", "tcsh"]).code, Some(64));
}
