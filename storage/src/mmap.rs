//! The crate's only `unsafe` code: memory maps of index files.
//!
//! A map is valid only while nobody else truncates or rewrites the mapped file. That holds here
//! because index files are private to one `Log`: they are opened, resized and written only by
//! the index that owns the map, under that index's lock, and remapped after every resize.
//! Callers outside this module never see a raw pointer.

use std::fs::File;

/// A writable shared map of a whole file (`None` for an empty file, which cannot be mapped).
pub(crate) struct FileMap {
    map: Option<memmap2::MmapMut>,
}

impl FileMap {
    /// Maps the first `len` bytes of `file`, which must be at least `len` bytes long.
    pub(crate) fn map(file: &File, len: usize) -> std::io::Result<FileMap> {
        if len == 0 {
            return Ok(FileMap { map: None });
        }
        // SAFETY: the file is owned by one index (see the module docs); nobody truncates it
        // while this map lives — resizes drop the map first and create a new one — and the
        // process does not map it twice, so the bytes cannot change under a `&[u8]` we hand out
        // except through `as_mut`, which needs `&mut self`.
        let map = unsafe { memmap2::MmapOptions::new().len(len).map_mut(file)? };
        // Index pages are touched one at a time (appends at the end, binary searches). Without
        // this, a fault in the preallocated (sparse) file reads ahead and zero-fills a large
        // window of pages, which made appends pay for page cache churn.
        map.advise(memmap2::Advice::Random)?;
        Ok(FileMap { map: Some(map) })
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }

    pub(crate) fn as_mut(&mut self) -> &mut [u8] {
        self.map.as_deref_mut().unwrap_or(&mut [])
    }

    /// msync: writes dirty pages of the map to the file.
    pub(crate) fn flush(&self) -> std::io::Result<()> {
        match &self.map {
            Some(m) => m.flush(),
            None => Ok(()),
        }
    }
}
