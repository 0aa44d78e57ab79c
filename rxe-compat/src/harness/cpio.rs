//! A minimal writer for the `newc` cpio format the Linux kernel unpacks as an initramfs.
//!
//! Contract: [`Cpio::finish`] returns a complete archive (entries + `TRAILER!!!`) whose every
//! header and data block is 4-byte aligned, as `init/initramfs.c` requires. Only directories and
//! regular files are supported; all entries are owned by root with mtime 0, so the same input
//! always gives the same bytes. The kernel unpacks a later archive over an earlier one
//! (regular files are opened with `O_TRUNC`), which is how the harness overlays `/init`,
//! `/roce/env`, `/roce/cmd.sh` and extra files onto the cached guest image.

use std::collections::BTreeSet;

/// Builder for one uncompressed newc archive.
#[derive(Debug, Default)]
pub struct Cpio {
    buf: Vec<u8>,
    ino: u32,
    dirs: BTreeSet<String>,
}

impl Cpio {
    /// An empty archive.
    pub fn new() -> Cpio {
        Cpio { buf: Vec::new(), ino: 0x7700_0000, dirs: BTreeSet::new() }
    }

    /// Adds directory `path` (relative, no leading `/`), and its parents, once each.
    pub fn dir(&mut self, path: &str) {
        let path = path.trim_matches('/');
        if path.is_empty() || self.dirs.contains(path) {
            return;
        }
        if let Some((parent, _)) = path.rsplit_once('/') {
            self.dir(parent);
        }
        self.dirs.insert(path.to_string());
        self.entry(path, 0o040_755, 2, &[]);
    }

    /// Adds regular file `path` with permission bits `perm` (e.g. `0o755`) and its parents.
    pub fn file(&mut self, path: &str, perm: u32, data: &[u8]) {
        let path = path.trim_matches('/');
        if let Some((parent, _)) = path.rsplit_once('/') {
            self.dir(parent);
        }
        self.entry(path, 0o100_000 | (perm & 0o7777), 1, data);
    }

    /// Appends the trailer and returns the archive.
    pub fn finish(mut self) -> Vec<u8> {
        self.ino = 0;
        self.entry("TRAILER!!!", 0, 1, &[]);
        self.buf
    }

    fn entry(&mut self, name: &str, mode: u32, nlink: u32, data: &[u8]) {
        self.ino = self.ino.wrapping_add(1);
        let namesize = name.len() + 1;
        let fields = [
            self.ino,
            mode,
            0,
            0,
            nlink,
            0,
            u32::try_from(data.len()).unwrap_or(u32::MAX),
            0,
            0,
            0,
            0,
            u32::try_from(namesize).unwrap_or(u32::MAX),
            0,
        ];
        self.buf.extend_from_slice(b"070701");
        for f in fields {
            self.buf.extend_from_slice(format!("{f:08X}").as_bytes());
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self.pad4();
        self.buf.extend_from_slice(data);
        self.pad4();
    }

    fn pad4(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_newc() {
        let mut c = Cpio::new();
        c.file("roce/env", 0o644, b"A=1\n");
        let a = c.finish();
        // dir "roce", file "roce/env", trailer
        assert_eq!(&a[..6], b"070701");
        assert_eq!(a.len() % 4, 0);
        let s = String::from_utf8_lossy(&a);
        let roce = s.find("roce\0").unwrap();
        let env = s.find("roce/env\0").unwrap();
        let trailer = s.find("TRAILER!!!\0").unwrap();
        assert!(roce < env && env < trailer);
        // the file header: mode 0100644, filesize 4, namesize 9
        let h = &s[env - 110..env];
        assert_eq!(&h[14..22], "000081A4");
        assert_eq!(&h[54..62], "00000004");
        assert_eq!(&h[94..102], "00000009");
        // data starts 4-aligned right after the padded name
        let data_at = (env + 9).div_ceil(4) * 4;
        assert_eq!(&a[data_at..data_at + 4], b"A=1\n");
    }

    #[test]
    fn parents_once() {
        let mut c = Cpio::new();
        c.file("a/b/c", 0o755, b"x");
        c.file("a/b/d", 0o755, b"y");
        let a = String::from_utf8_lossy(&c.finish()).into_owned();
        assert_eq!(a.matches("a/b\0").count(), 1);
        assert_eq!(a.matches("070701").count(), 5);
    }
}
