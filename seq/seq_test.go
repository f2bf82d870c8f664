package seq

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestAssignBalanced: every member owns ⌊S/n⌋ or ⌈S/n⌉ sections, every
// section has an owner, and the result does not depend on the members'
// order. Plain rendezvous (each section to its heaviest member) fails it:
// over these draws some member of three gets none of 16 sections.
func TestAssignBalanced(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for draw := range 2000 {
		n := 1 + r.IntN(6)
		S := []int{1, 2, 3, 4, 7, 16, 64, 100}[r.IntN(8)]
		members := make([]string, n)
		for i := range members {
			members[i] = fmt.Sprintf("inst-%d-%x", i, r.Uint64())
		}
		got := Assign(S, members)
		count := map[string]int{}
		for s, o := range got {
			if !slices.Contains(members, o) {
				t.Fatalf("draw %d: section %d of %d owned by %q, not a member of %v", draw, s, S, o, members)
			}
			count[o]++
		}
		lo, hi := S/n, (S+n-1)/n
		for _, m := range members {
			if c := count[m]; c < lo || c > hi {
				t.Fatalf("draw %d: %s owns %d of %d sections among %d members, want %d–%d: %v", draw, m, c, S, n, lo, hi, count)
			}
		}
		shuffled := slices.Clone(members)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if again := Assign(S, shuffled); !slices.Equal(got, again) {
			t.Fatalf("draw %d: the assignment depends on the members' order:\n%v\n%v", draw, got, again)
		}
	}
	if got := Assign(4, nil); !slices.Equal(got, []string{"", "", "", ""}) {
		t.Fatalf("Assign(4, none) = %q, want four empty owners", got)
	}
}

// TestAssignMovesLittle: a member joining takes about its share, and the
// sections that move go to it; a member leaving moves about its share.
// Averaged over draws, a join of a fourth member to 64 sections moves at
// most 1.5 times the 16 it must gain.
func TestAssignMovesLittle(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const S, draws = 64, 300
	moved, toNew := 0, 0
	for range draws {
		members := []string{}
		for i := range 3 {
			members = append(members, fmt.Sprintf("inst-%d-%x", i, r.Uint64()))
		}
		before := Assign(S, members)
		joined := fmt.Sprintf("inst-3-%x", r.Uint64())
		after := Assign(S, append(slices.Clone(members), joined))
		for s := range S {
			if before[s] != after[s] {
				moved++
				if after[s] == joined {
					toNew++
				}
			}
		}
		// The reverse: it leaves again, and the map is the one before.
		if back := Assign(S, members); !slices.Equal(back, before) {
			t.Fatal("the same members gave another assignment")
		}
	}
	if toNew != draws*S/4 {
		t.Errorf("the joining member got %d sections over %d draws, want %d (its share each time)", toNew, draws, draws*S/4)
	}
	if float64(moved) > 1.5*float64(draws*S/4) {
		t.Errorf("a join moved %d sections over %d draws, more than 1.5 × the %d it must", moved, draws, draws*S/4)
	}
	t.Logf("a join of a fourth member to %d sections moved %.1f on average (its share: %d)", S, float64(moved)/draws, S/4)
}
