// Package conformance holds black-box tests of heed's contract
// (docs/EVENTS.md, docs/AGENTS.md, docs/SKILLS.md, docs/HEALING.md).
//
// The tests treat heed exactly as an agent written in another language
// would: they run the heed binary (`heed up`) as a child process and speak
// plain NATS to it — CloudEvents in binary mode on JetStream, commands as
// request/reply on heed.cmd.* — with nats.go and the standard library only.
// Nothing here imports a heed package.
package conformance
