package load

import "math/bits"

// hist is a log-linear latency histogram in nanoseconds: exact below 128,
// then 64 buckets per power of two (under 1.6% wide). Recording is a few
// instructions and allocates nothing; each caller owns one.
type hist struct {
	counts [57*64 + 128]uint64
	total  uint64
	max    int64
}

const histSub = 64

func histIndex(v int64) int {
	if v < 2*histSub {
		return int(max(v, 0))
	}
	shift := bits.Len64(uint64(v)) - 7 // keep the top 7 bits: [64, 128)
	return shift*histSub + int(v>>shift)
}

// histLow is the smallest value of bucket i.
func histLow(i int) int64 {
	if i < 2*histSub {
		return int64(i)
	}
	shift := i/histSub - 1
	return int64(i%histSub+histSub) << shift
}

func (h *hist) record(v int64) {
	h.counts[histIndex(v)]++
	h.total++
	h.max = max(h.max, v)
}

func (h *hist) merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.max = max(h.max, o.max)
}

// quantile returns the value under which a fraction q of the samples
// lie, as the middle of its bucket (0 with no samples).
func (h *hist) quantile(q float64) int64 {
	if h.total == 0 {
		return 0
	}
	rank := uint64(q * float64(h.total))
	if rank >= h.total {
		rank = h.total - 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen > rank {
			lo, hi := histLow(i), histLow(i+1)
			return min(lo+(hi-lo)/2, h.max)
		}
	}
	return h.max
}

// latency is the histogram's percentiles.
func (h *hist) latency() Latency {
	return Latency{
		P50: h.quantile(0.50), P90: h.quantile(0.90), P99: h.quantile(0.99), P999: h.quantile(0.999),
		Max: h.max, Samples: h.total,
	}
}
