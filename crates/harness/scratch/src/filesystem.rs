//! Names of filesystem types, from the `f_type` magic numbers of `statfs(2)`.

/// Returns the name of the filesystem type with magic number `magic`, or `"unknown"`.
pub(crate) fn type_name(magic: u64) -> &'static str {
    match magic {
        0xef53 => "ext2/ext3/ext4",
        0x5846_5342 => "xfs",
        0x9123_683e => "btrfs",
        0x0102_1994 => "tmpfs",
        0x794c_7630 => "overlayfs",
        0x2fc1_2fc1 => "zfs",
        0xf2f5_2010 => "f2fs",
        0x6969 => "nfs",
        0xff53_4d42 => "cifs",
        0xfe53_4d42 => "smb2",
        0x0102_1997 => "9p",
        0x6a65_6a63 => "virtiofs",
        0x6573_5546 => "fuse",
        0x00c3_6400 => "ceph",
        0x7371_7368 => "squashfs",
        0x5346_544e => "ntfs",
        0x4d44 => "vfat",
        0x2011_bab0 => "exfat",
        0x6265_6572 => "sysfs",
        0x9fa0 => "proc",
        _ => "unknown",
    }
}
