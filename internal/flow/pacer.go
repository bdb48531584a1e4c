package flow

// Pacer is flow control as a delivery stage sees it (the drain, the
// fan-out's secondaries, recovery): the batch size to use now, and how
// each sink write went. Scale is asked at every batch, so a change of
// state shows in the next batch; WriteFailed and WriteSucceeded are called
// after every sink call that returned (not one cut short by shutdown),
// which also counts as progress for the stuck detector. *Controller
// implements it; WithBatchPercent narrows it by a profile.
type Pacer interface {
	// Scale returns n scaled by the backpressure state's batch factor, at
	// least 1.
	Scale(n int) int
	// WriteFailed counts a sink write that returned an error.
	WriteFailed()
	// WriteSucceeded ends a run of failed writes.
	WriteSucceeded()
}

var _ Pacer = (*Controller)(nil)

// WithBatchPercent returns p with every batch size first scaled by
// percent() % (the quorum profile's flow.quorum_batch_percent; 100 leaves
// it), read at each call so a profile switch shows in the next batch.
func WithBatchPercent(p Pacer, percent func() int) Pacer {
	return percentPacer{p, percent}
}

type percentPacer struct {
	Pacer
	percent func() int
}

func (p percentPacer) Scale(n int) int {
	if pc := p.percent(); pc > 0 && pc < 100 {
		n = max(1, n*pc/100)
	}
	return p.Pacer.Scale(n)
}
