package datadir

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"strconv"
	"strings"
)

// A generator's state is written in place, alternately into two slot
// files (gen-<name>.0 and gen-<name>.1), each holding one record:
//
//	firn-state 1 <sequence> <length> <crc32c hex>\n<payload>
//
// A save overwrites the older slot and fsyncs it; no file is created,
// renamed or unlinked, so no directory fsync is needed after the first.
// A crash during a save tears at most that slot, whose record then fails
// its length or checksum: load takes the valid record with the highest
// sequence, which is the state before the torn save — and the save a
// Reserve waits on returned before the Reserve was sent, so nothing was
// acknowledged past it.

const slotMagic = "firn-state 1"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func encodeSlot(seq uint64, payload []byte) []byte {
	head := fmt.Sprintf("%s %d %d %08x\n", slotMagic, seq, len(payload), crc32.Checksum(payload, castagnoli))
	return append([]byte(head), payload...)
}

// decodeSlot returns the record's sequence and payload, or an error for a
// torn or foreign file.
func decodeSlot(b []byte) (uint64, []byte, error) {
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 {
		return 0, nil, fmt.Errorf("%w: no record header", errCutShort)
	}
	var seq uint64
	var n int
	var sum uint32
	fields, ok := strings.CutPrefix(string(b[:nl]), slotMagic+" ")
	if !ok {
		// "firn-state N" with N > 1: a later version's record, never a
		// torn one of this format (whose header says 1).
		if rest, ours := strings.CutPrefix(string(b[:nl]), "firn-state "); ours {
			v, _, _ := strings.Cut(rest, " ")
			if n, err := strconv.ParseUint(v, 10, 32); err == nil && n > 1 {
				return 0, nil, fmt.Errorf("%w: format %d (this version reads format 1)", errNewerFormat, n)
			}
		}
		return 0, nil, fmt.Errorf("bad record header %q", b[:nl])
	}
	if _, err := fmt.Sscanf(fields, "%d %d %x", &seq, &n, &sum); err != nil || fmt.Sprintf("%d %d %08x", seq, n, sum) != fields {
		// Only the header encodeSlot writes: no two headers for one record.
		return 0, nil, fmt.Errorf("bad record header %q", b[:nl])
	}
	payload := b[nl+1:]
	if len(payload) < n {
		return 0, nil, fmt.Errorf("%w: record of %d bytes holds %d (torn write)", errCutShort, n, len(payload))
	}
	if len(payload) != n {
		return 0, nil, fmt.Errorf("record of %d bytes holds %d (torn write)", n, len(payload))
	}
	if crc32.Checksum(payload, castagnoli) != sum {
		return 0, nil, errors.New("record checksum mismatch (torn write)")
	}
	return seq, payload, nil
}

// syncSlot fsyncs a slot file (a variable: tests stall it, as a disk
// does).
var syncSlot = (*os.File).Sync

// errCutShort: a slot's record ends before its header does, or before
// the length its header gives: what a crash leaves of a file whose first
// write it cut short (empty, or zeros, or part of the record).
var errCutShort = errors.New("cut short")

// errNewerFormat: a slot holds a record of a later version's format. It
// is refused, not skipped as torn: the other slot's record is older.
var errNewerFormat = errors.New("record written by a newer version of firn")

// slots is the pair of slot files of one generator.
type slots struct {
	base  string // path without the .0/.1 suffix
	files [2]*os.File
	seq   uint64 // sequence of the newest valid record (0: none)
}

func (s *slots) path(i int) string { return s.base + "." + strconv.Itoa(i) }

// load reads both slots and returns the payload of the newest valid
// record (nil when neither file exists). A file that exists but holds no
// valid record is skipped when the other one is valid, and is an
// ErrCorrupt otherwise.
func (s *slots) load() ([]byte, error) {
	var best []byte
	var bad []string
	var exists, short [2]bool
	for i := 0; i < 2; i++ {
		b, err := os.ReadFile(s.path(i))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		exists[i] = true
		if err != nil {
			return nil, fmt.Errorf("local: %w", err)
		}
		seq, payload, err := decodeSlot(b)
		if errors.Is(err, errNewerFormat) {
			return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, s.path(i), err)
		}
		if err != nil {
			short[i] = errors.Is(err, errCutShort)
			bad = append(bad, fmt.Sprintf("%s: %v", s.path(i), err))
			continue
		}
		if best == nil || seq > s.seq {
			best, s.seq = payload, seq
		}
	}
	if best == nil && len(bad) > 0 {
		if exists[1] && !exists[0] && short[1] {
			// Slot 1 alone, cut short: the first save (sequence 1; slot
			// 0 is created by the second) was torn by a crash, and no
			// Reserve waited on it was sent. The state is the one before
			// it, as when the crash lost the new file's name: none, or
			// the earlier versions' file. The next save rewrites slot 1.
			// A whole record that fails its checksum is no crash's work
			// on a new file, and stays refused.
			return nil, nil
		}
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, bad)
	}
	return best, nil
}

// save writes payload as the next record into the older slot, in place,
// and fsyncs it. It reports whether it created a slot file (the caller
// then fsyncs the directory once).
func (s *slots) save(payload []byte) (created bool, err error) {
	seq := s.seq + 1
	i := int(seq % 2)
	f := s.files[i]
	if f == nil {
		_, statErr := os.Stat(s.path(i))
		f, err = os.OpenFile(s.path(i), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return false, fmt.Errorf("local: %w", err)
		}
		s.files[i], created = f, errors.Is(statErr, os.ErrNotExist)
	}
	rec := encodeSlot(seq, payload)
	if _, err := f.WriteAt(rec, 0); err != nil {
		return created, fmt.Errorf("local: writing %s: %w", s.path(i), err)
	}
	if err := f.Truncate(int64(len(rec))); err != nil {
		return created, fmt.Errorf("local: truncating %s: %w", s.path(i), err)
	}
	if err := syncSlot(f); err != nil {
		return created, fmt.Errorf("local: fsync %s: %w", s.path(i), err)
	}
	s.seq = seq
	return created, nil
}
