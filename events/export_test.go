package events

// ReplayBeforeApply runs a function between Replay's comparison and its
// apply, so a test can write to the bucket in between.
type ReplayBeforeApply func()

func (f ReplayBeforeApply) replayOption(o *replayOpts) { o.beforeApply = f }
