package vfs

import "path"

// ReplaceFile replaces dir/name with data durably: written to name+".tmp",
// fsynced, renamed over name, then the directory fsynced. A crash leaves
// the old file or the new one, never a mix (the temporary file may stay
// behind; it is overwritten by the next call).
func ReplaceFile(fsys FS, dir, name string, data []byte) error {
	tmp := path.Join(dir, name+".tmp")
	f, err := fsys.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(data, 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := fsys.Rename(tmp, path.Join(dir, name)); err != nil {
		return err
	}
	return fsys.SyncDir(dir)
}
