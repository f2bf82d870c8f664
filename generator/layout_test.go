package generator

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var testNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func TestPresetsValidate(t *testing.T) {
	want := map[string]string{
		"snowflake":  "time=41,dc=5,worker=5,seq=12,unit=1ms,epoch=2010-11-04T01:42:54.657Z",
		"sonyflake":  "time=39,dc=0,worker=16,seq=8,unit=10ms,epoch=2014-09-01T00:00:00Z,order=time-seq-dc-worker",
		"wideworker": "time=31,dc=0,worker=19,seq=13,unit=1s,epoch=2026-01-01T00:00:00Z",
		"compact":    "time=32,dc=0,worker=4,seq=6,unit=1s,epoch=2022-01-01T00:00:00Z",
	}
	for _, name := range PresetNames() {
		t.Run(name, func(t *testing.T) {
			l, ok := Preset(name)
			if !ok {
				t.Fatalf("preset %q missing", name)
			}
			if err := l.Validate(testNow); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if got := l.String(); got != want[name] {
				t.Fatalf("String() = %s, want %s", got, want[name])
			}
			back, err := ParseLayout(l.String())
			if err != nil {
				t.Fatalf("ParseLayout(String()): %v", err)
			}
			if !back.Epoch.Equal(l.Epoch) || back.String() != l.String() {
				t.Fatalf("round trip %s -> %s", l, back)
			}
		})
	}
	if len(want) != len(PresetNames()) {
		t.Fatalf("presets %v, want %d", PresetNames(), len(want))
	}
	if l, _ := Preset("compact"); l.TotalBits() != 42 {
		t.Fatalf("compact uses %d bits, want 42", l.TotalBits())
	}
}

func TestValidateRefuses(t *testing.T) {
	sf, _ := Preset("snowflake")
	mod := func(f func(*Layout)) Layout { l := sf; f(&l); return l }
	cases := []struct {
		name  string
		l     Layout
		field string
		text  string
	}{
		{"too many bits", mod(func(l *Layout) { l.SequenceBits = 13 }), "bits", "64 exceeds 63"},
		{"zero time", mod(func(l *Layout) { l.TimeBits = 0 }), "time", "at least 1 bit"},
		{"zero seq", mod(func(l *Layout) { l.SequenceBits = 0 }), "seq", "at least 1 bit"},
		{"no node field", mod(func(l *Layout) { l.WorkerBits, l.DatacenterBits = 0, 0 }), "worker", "at least 1 bit"},
		{"epoch in future", mod(func(l *Layout) { l.Epoch = testNow.Add(time.Hour) }), "epoch", "in the future"},
		{"runs out soon", mod(func(l *Layout) { l.TimeBits = 38 }), "time", "run out"},
		{"expired 2024 style", mod(func(l *Layout) { l.TimeBits = 41; l.Epoch = time.Date(1955, 1, 1, 0, 0, 0, 0, time.UTC) }), "time", "run out"},
		{"unit too small", mod(func(l *Layout) { l.Unit = time.Nanosecond }), "unit", "below the minimum"},
		{"unit zero", mod(func(l *Layout) { l.Unit = 0 }), "unit", "below the minimum"},
		{"no epoch", mod(func(l *Layout) { l.Epoch = time.Time{} }), "epoch", "must be set"},
		// A time field lasting to the year 36,000 from an epoch 326 years
		// back: the units since the epoch, counted in nanoseconds, no
		// longer fit in 64 bits (a Windows FILETIME or .NET epoch).
		{"epoch too far back", func() Layout {
			l, err := ParseLayout("time=40,dc=0,worker=10,seq=13,unit=1s,epoch=1700-01-01T00:00:00Z")
			if err != nil {
				t.Fatal(err)
			}
			return l
		}(), "epoch", "too far back"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.l.Validate(testNow)
			var le *LayoutError
			if !errors.As(err, &le) || !errors.Is(err, ErrLayout) {
				t.Fatalf("Validate = %v, want a *LayoutError", err)
			}
			if le.Field != c.field || !strings.Contains(err.Error(), c.text) {
				t.Fatalf("Validate = %q (field %q), want field %q containing %q", err, le.Field, c.field, c.text)
			}
		})
	}
}

func TestParseLayout(t *testing.T) {
	cases := []struct {
		in, want, errField string
	}{
		{in: "snowflake", want: "time=41,dc=5,worker=5,seq=12,unit=1ms,epoch=2010-11-04T01:42:54.657Z"},
		{in: "seq=12, worker=10, time=41, epoch=1288834974657", want: "time=41,dc=0,worker=10,seq=12,unit=1ms,epoch=2010-11-04T01:42:54.657Z"},
		{in: "time=40,worker=8,seq=10,unit=10ms,epoch=2020-01-01T00:00:00Z", want: "time=40,dc=0,worker=8,seq=10,unit=10ms,epoch=2020-01-01T00:00:00Z"},
		{in: "nosuch", errField: "layout"},
		{in: "time=41,worker=5", errField: "seq"},
		{in: "time=41,worker=5,seq=12,epoch=x", errField: "epoch"},
		{in: "time=41,worker=5,seq=12,epoch=0,color=red", errField: "color"},
		{in: "time=99,worker=5,seq=12,epoch=0", errField: "time"},
		{in: "time=41,time=41,worker=5,seq=12,epoch=0", errField: "time"},
		{in: "time=41,worker=5,seq=12,epoch=0,unit=-1s", errField: "unit"},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			l, err := ParseLayout(c.in)
			if c.errField != "" {
				var le *LayoutError
				if !errors.As(err, &le) || le.Field != c.errField {
					t.Fatalf("ParseLayout = %v, want error on field %q", err, c.errField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if l.String() != c.want {
				t.Fatalf("got %s, want %s", l, c.want)
			}
		})
	}
}

func TestEncodeNeverMasks(t *testing.T) {
	sf, _ := Preset("snowflake")
	cases := []struct {
		name            string
		units           int64
		dc, worker, seq uint64
	}{
		{"time below epoch", -1, 0, 0, 0},
		{"time past field", sf.MaxTime() + 1, 0, 0, 0},
		{"datacenter too wide", 5, 32, 0, 0},
		{"worker too wide", 5, 0, 32, 0},
		{"sequence too wide", 5, 0, 0, 4096},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if id, err := sf.Encode(c.units, c.dc, c.worker, c.seq); !errors.Is(err, ErrField) {
				t.Fatalf("Encode = %d, %v; want ErrField", id, err)
			}
		})
	}
	id, err := sf.Encode(sf.MaxTime(), 31, 31, 4095)
	if err != nil || id != 1<<63-1 {
		t.Fatalf("Encode(max) = %x, %v; want 0x7fff...", id, err)
	}
}

func TestDecode(t *testing.T) {
	sf, _ := Preset("snowflake")
	// 2020-01-01T00:00:00Z is 1577836800000 − 1288834974657 ms after the
	// snowflake epoch; worker 3 of datacenter 2, sequence 7.
	want := int64(1577836800000 - 1288834974657)
	p, err := sf.Decode(uint64(want)<<22 | 2<<17 | 3<<12 | 7)
	if err != nil {
		t.Fatal(err)
	}
	if p.Units != want || p.Datacenter != 2 || p.Worker != 3 || p.Sequence != 7 ||
		!p.Time.Equal(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("Decode = %+v", p)
	}
	if _, err := sf.Decode(1 << 63); !errors.Is(err, ErrBadID) {
		t.Fatalf("Decode(sign bit) = %v, want ErrBadID", err)
	}
	c, _ := Preset("compact")
	if _, err := c.Decode(1 << 42); !errors.Is(err, ErrBadID) {
		t.Fatalf("Decode(bit 42 of a 42-bit layout) = %v, want ErrBadID", err)
	}
	id, _ := c.Encode(12345, 0, 9, 33)
	p, err = c.Decode(id)
	if err != nil || p.Units != 12345 || p.Worker != 9 || p.Sequence != 33 || p.Datacenter != 0 {
		t.Fatalf("Decode = %+v, %v", p, err)
	}
	if !p.Time.Equal(c.Epoch.Add(12345 * time.Second)) {
		t.Fatalf("time %v", p.Time)
	}
}

func TestUnitsFloors(t *testing.T) {
	sf, _ := Preset("snowflake")
	cases := []struct {
		d    time.Duration
		want int64
	}{{0, 0}, {999 * time.Microsecond, 0}, {time.Millisecond, 1}, {-1, -1}, {-time.Millisecond, -1}, {-time.Millisecond - 1, -2}}
	for _, c := range cases {
		if got := sf.Units(sf.Epoch.Add(c.d)); got != c.want {
			t.Errorf("Units(epoch%+v) = %d, want %d", c.d, got, c.want)
		}
	}
}

func FuzzParseLayout(f *testing.F) {
	for _, n := range PresetNames() {
		l, _ := Preset(n)
		f.Add(l.String())
		f.Add(n)
	}
	f.Add("time=41,worker=5,seq=12,epoch=0")
	f.Add("time=,=,,")
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLayout(s)
		if err != nil {
			if !errors.Is(err, ErrLayout) {
				t.Fatalf("error %v does not match ErrLayout", err)
			}
			return
		}
		if l.Validate(testNow) != nil {
			return
		}
		back, err := ParseLayout(l.String())
		if err != nil || back.String() != l.String() {
			t.Fatalf("canonical form %q does not round trip: %v", l.String(), err)
		}
	})
}

func FuzzDecode(f *testing.F) {
	f.Add(uint64(0), uint8(0))
	f.Add(uint64(1<<63), uint8(1))
	f.Add(uint64(1212161226423910400), uint8(2))
	f.Fuzz(func(t *testing.T, id uint64, which uint8) {
		names := PresetNames()
		l, _ := Preset(names[int(which)%len(names)])
		p, err := l.Decode(id)
		if err != nil {
			if id>>uint(l.TotalBits()) == 0 {
				t.Fatalf("Decode refused a valid %d-bit ID %d: %v", l.TotalBits(), id, err)
			}
			return
		}
		back, err := l.Encode(p.Units, p.Datacenter, p.Worker, p.Sequence)
		if err != nil || back != id {
			t.Fatalf("Encode(Decode(%d)) = %d, %v", id, back, err)
		}
	})
}

func FuzzRoundTrip(f *testing.F) {
	f.Add(int64(0), uint64(0), uint64(0), uint64(0))
	f.Add(int64(1<<40), uint64(3), uint64(7), uint64(4095))
	f.Add(int64(-5), uint64(99), uint64(1<<20), uint64(1<<13))
	f.Fuzz(func(t *testing.T, units int64, dc, worker, seq uint64) {
		for _, n := range PresetNames() {
			l, _ := Preset(n)
			id, err := l.Encode(units, dc, worker, seq)
			fits := units >= 0 && units <= l.MaxTime() && dc < l.DatacenterLimit() && worker < l.WorkerLimit() && seq <= l.MaxSequence()
			if (err == nil) != fits {
				t.Fatalf("%s: Encode(%d,%d,%d,%d) err=%v, fits=%v", n, units, dc, worker, seq, err, fits)
			}
			if err != nil {
				continue
			}
			if id>>63 != 0 {
				t.Fatalf("%s: sign bit set", n)
			}
			p, err := l.Decode(id)
			if err != nil || p.Units != units || p.Datacenter != dc || p.Worker != worker || p.Sequence != seq {
				t.Fatalf("%s: Decode(Encode) = %+v, %v", n, p, err)
			}
		}
	})
}

// The field order: SeqNode puts the sequence above the node fields, the
// canonical form names it (and only it), and the IDs of one worker still
// increase within a unit and across units.
func TestLayoutOrder(t *testing.T) {
	l, err := ParseLayout("time=39,dc=2,worker=14,seq=8,unit=10ms,epoch=2014-09-01T00:00:00Z,order=time-seq-dc-worker")
	if err != nil {
		t.Fatal(err)
	}
	if l.Order != SeqNode {
		t.Fatalf("order %v, want %v", l.Order, SeqNode)
	}
	id, err := l.Encode(5, 1, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(5)<<24 | 2<<16 | 1<<14 | 3; id != want {
		t.Fatalf("Encode = %#x, want %#x (time, seq, dc, worker)", id, want)
	}
	p, err := l.Decode(id)
	if err != nil || p.Units != 5 || p.Datacenter != 1 || p.Worker != 3 || p.Sequence != 2 {
		t.Fatalf("Decode = %+v, %v", p, err)
	}
	next, _ := l.Encode(5, 1, 3, 3)
	later, _ := l.Encode(6, 1, 3, 0)
	if !(id < next && next < later) {
		t.Fatalf("one worker's IDs do not increase: %d, %d, %d", id, next, later)
	}
	// The default order is not written: pins of existing layouts keep
	// their canonical string.
	def, _ := ParseLayout("time=41,dc=5,worker=5,seq=12,unit=1ms,epoch=2010-11-04T01:42:54.657Z,order=time-dc-worker-seq")
	if sf, _ := Preset("snowflake"); def.String() != sf.String() {
		t.Fatalf("explicit default order %q, want %q", def.String(), sf.String())
	}
	for _, bad := range []string{"time=41,worker=10,seq=12,epoch=0,order=seq-first", "time=41,worker=10,seq=12,epoch=0,order="} {
		var le *LayoutError
		if _, err := ParseLayout(bad); !errors.As(err, &le) || le.Field != "order" {
			t.Errorf("ParseLayout(%q) = %v, want a LayoutError on order", bad, err)
		}
	}
	if err := (Layout{Epoch: testNow.AddDate(-1, 0, 0), Unit: time.Millisecond, TimeBits: 41, WorkerBits: 10, SequenceBits: 12, Order: 7}).Validate(testNow); err == nil || !strings.Contains(err.Error(), "order") {
		t.Fatalf("Validate of order 7: %v", err)
	}
}

// The old preset name says what it became and why.
func TestRenamedPreset(t *testing.T) {
	_, err := ParseLayout("uidgen")
	if !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), `"wideworker"`) || !strings.Contains(err.Error(), "UidGenerator") {
		t.Fatalf("ParseLayout(uidgen) = %v, want the rename named", err)
	}
}

// A layout whose epoch lies far back, but within the 292 years its units
// are counted over, serves at a clock inside it: Validate accepts what
// the generator can issue. Before, an epoch of 1700 passed Validate and
// every call then failed (the units since the epoch overflowed), with
// a CLOCK_RANGE refusal naming a range the clock lay inside.
func TestOldEpochServes(t *testing.T) {
	for _, c := range []struct {
		epoch string
		ok    bool
	}{{"1760-01-01T00:00:00Z", true}, {"1700-01-01T00:00:00Z", false}} {
		l, err := ParseLayout("time=40,dc=0,worker=10,seq=13,unit=1s,epoch=" + c.epoch)
		if err != nil {
			t.Fatal(err)
		}
		err = l.Validate(testNow)
		if (err == nil) != c.ok {
			t.Fatalf("epoch %s: Validate = %v, want ok %v", c.epoch, err, c.ok)
		}
		if !c.ok {
			continue
		}
		if got, want := l.Units(testNow), int64(testNow.Sub(l.Epoch)/time.Second); got != want {
			t.Fatalf("epoch %s: Units(now) = %d, want %d", c.epoch, got, want)
		}
		clock := &manualClock{wall: testNow}
		g, err := New(Config{Layout: l, Worker: 1, Clock: clock, Floor: -1, Reserved: NoReservation})
		if err != nil {
			t.Fatal(err)
		}
		g.SetReserved(l.Units(testNow) + 10)
		dst := make([]uint64, 1)
		if n, err := g.TryBatch(dst); err != nil || n != 1 {
			t.Fatalf("epoch %s: TryBatch = %d, %v", c.epoch, n, err)
		}
		if p, _ := l.Decode(dst[0]); !p.Time.Equal(testNow.Truncate(time.Second)) {
			t.Fatalf("epoch %s: the ID decodes to %v, want %v", c.epoch, p.Time, testNow.Truncate(time.Second))
		}
	}
}
