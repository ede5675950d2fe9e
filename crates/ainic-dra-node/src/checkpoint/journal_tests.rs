use super::*;
use crate::checkpoint::{PreparedDevice, encode, write_durably};

fn claim(name: &str) -> PreparedClaim {
    PreparedClaim {
        namespace: "ns".into(),
        name: name.into(),
        devices: vec![PreparedDevice {
            admin_access: false,
            requests: vec!["nic".into()],
            pool: "node-a".into(),
            device: "pf-0000-0c-00-0".into(),
            share_id: None,
            cdi_ids: vec![format!("amd.com/ainic={name}")],
            identity: None,
            netdev: None,
        }],
        cdi_file: format!("{name}.json"),
        cdi_spec: String::new(),
        metadata_specs: Default::default(),
        metadata_files: Default::default(),
        metadata: Default::default(),
    }
}

fn put(uid: &str) -> Record {
    Record::Put {
        uid: uid.into(),
        claim: Box::new(claim(uid)),
    }
}

fn append(journal: &mut Journal, records: &[Record]) {
    let bytes: Vec<u8> = records.iter().flat_map(Record::encode).collect();
    journal.append(&bytes).unwrap();
}

#[test]
fn records_replay_into_the_checkpoint_after_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut opened = Journal::open(dir.path(), "boot-1").unwrap();
    assert!(opened.checkpoint.claims.is_empty());
    append(
        &mut opened.journal,
        &[put("a"), put("b"), Record::Del("a".into())],
    );
    let again = Journal::open(dir.path(), "boot-1").unwrap();
    assert_eq!(again.checkpoint.claims.keys().collect::<Vec<_>>(), ["b"]);
    assert_eq!(again.previous_boot, None);
    assert!(!again.torn_tail);
}

#[test]
fn an_append_costs_its_record_not_the_checkpoint() {
    // Issue 34: format v1 rewrote every claim at each change.
    let dir = tempfile::tempdir().unwrap();
    let mut opened = Journal::open(dir.path(), "b").unwrap();
    let many: Vec<Record> = (0..1000).map(|i| put(&format!("u{i}"))).collect();
    append(&mut opened.journal, &many);
    let before = opened.journal.bytes();
    append(&mut opened.journal, &[put("one-more")]);
    let grew = opened.journal.bytes() - before;
    assert_eq!(grew, put("one-more").encode().len() as u64);
}

#[test]
fn a_torn_last_record_is_dropped_and_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let mut opened = Journal::open(dir.path(), "b").unwrap();
    append(&mut opened.journal, &[put("a")]);
    // A crash in the middle of the next append.
    let half = put("b").encode();
    let path = dir.path().join(FILE_NAME);
    let mut file = OpenOptions::new().append(true).open(&path).unwrap();
    file.write_all(&half[..half.len() / 2]).unwrap();
    let again = Journal::open(dir.path(), "b").unwrap();
    assert!(again.torn_tail);
    assert_eq!(again.checkpoint.claims.keys().collect::<Vec<_>>(), ["a"]);
    let bytes = std::fs::read(&path).unwrap();
    assert!(bytes.ends_with(b"\n"), "the torn bytes are gone");
    assert_eq!(read_only(dir.path()).unwrap(), again.checkpoint);
}

#[test]
fn a_bad_record_in_the_middle_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let mut opened = Journal::open(dir.path(), "b").unwrap();
    append(&mut opened.journal, &[put("a"), put("b")]);
    let path = dir.path().join(FILE_NAME);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replacen("\"a\"", "\"x\"", 1)).unwrap();
    let err = Journal::open(dir.path(), "b").unwrap_err().to_string();
    assert!(err.contains("checksum mismatch"), "{err}");
}

#[test]
fn a_newer_format_is_refused_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(FILE_NAME),
        "ainic-dra-checkpoint v3 boot=b\n",
    )
    .unwrap();
    let err = Journal::open(dir.path(), "b").unwrap_err().to_string();
    assert!(
        err.contains("format v3 was written by a newer agent"),
        "{err}"
    );
    assert!(err.contains(FILE_NAME), "names the file: {err}");
}

#[test]
fn a_v1_checkpoint_is_migrated_and_kept_as_this_boots() {
    let dir = tempfile::tempdir().unwrap();
    let mut v1 = Checkpoint::default();
    v1.claims.insert("old".into(), claim("old"));
    write_durably(&dir.path().join(super::super::FILE_NAME), &encode(&v1)).unwrap();
    let opened = Journal::open(dir.path(), "b").unwrap();
    assert_eq!(opened.checkpoint, v1);
    assert_eq!(opened.previous_boot, None, "an upgrade is no reboot");
    assert!(!dir.path().join(super::super::FILE_NAME).exists());
    assert_eq!(Journal::open(dir.path(), "b").unwrap().checkpoint, v1);
}

#[test]
fn another_boot_is_reported_and_the_journal_renamed_to_this_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut opened = Journal::open(dir.path(), "before").unwrap();
    append(&mut opened.journal, &[put("a")]);
    let after = Journal::open(dir.path(), "after").unwrap();
    assert_eq!(after.previous_boot.as_deref(), Some("before"));
    assert_eq!(
        after.checkpoint.claims.len(),
        1,
        "claims are kept: the kubelet still has them"
    );
    let again = Journal::open(dir.path(), "after").unwrap();
    assert_eq!(again.previous_boot, None);
}

#[test]
fn compaction_keeps_exactly_the_live_records() {
    let dir = tempfile::tempdir().unwrap();
    let mut opened = Journal::open(dir.path(), "b").unwrap();
    let mut checkpoint = Checkpoint::default();
    for i in 0..1000 {
        let records = [put(&format!("u{i}")), Record::Del(format!("u{i}"))];
        append(&mut opened.journal, &records);
        for r in records {
            r.apply(&mut checkpoint);
        }
    }
    append(&mut opened.journal, &[put("kept")]);
    put("kept").apply(&mut checkpoint);
    assert!(
        opened
            .journal
            .worth_compacting(put("kept").encode().len() as u64)
    );
    opened.journal.compact(&checkpoint).unwrap();
    assert!(
        !opened
            .journal
            .worth_compacting(put("kept").encode().len() as u64)
    );
    assert_eq!(
        Journal::open(dir.path(), "b").unwrap().checkpoint,
        checkpoint
    );
}
