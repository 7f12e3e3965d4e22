/*
Copyright 2026 The tpu-slice-operator Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package slicectrl

import (
	"strings"
	"time"
)

// maxNoteBytes is the longest note an events.k8s.io Event may carry (the API server refuses more
// than 1 kB).
const maxNoteBytes = 1024

// BoundedNote cuts a note that may be longer than an Event allows (it quotes stored lines or
// condition messages).
func BoundedNote(note string) string {
	if len(note) <= maxNoteBytes {
		return note
	}
	return strings.ToValidUTF8(note[:maxNoteBytes-3], "") + "..."
}

// maxMessageLength is the longest condition message the API server accepts (32 KiB); the
// messages written are far shorter (placement.NoFitMessage names at most a few domains).
const maxMessageLength = 32 * 1024

// BoundedMessage cuts a condition message the API server would refuse.
func BoundedMessage(s string) string {
	if len(s) <= maxMessageLength {
		return s
	}
	return s[:maxMessageLength-3] + "..."
}

// SettleCapFactor bounds a wait for a burst that does not end: at most this many settles from the
// burst's start (or from the last time the wait ended), so that a slice whose Pods keep coming (a
// slow creator of a large replica) is still looked at once per that long.
const SettleCapFactor = 5

// Burst times one slice's burst of changes (new claims, new Pods) on the observer's own clock
// (docs/spec.md §8, "Bookkeeping waits for bursts"; "Clocks").
type Burst struct {
	// Changed is when the slice last changed; Start when the burst Changed belongs to began.
	Changed, Start time.Time
}

// NewBurst is a burst that starts at now.
func NewBurst(now time.Time) Burst { return Burst{Changed: now, Start: now} }

// Mark records a change at now: a change a settle or more after the last one starts a new burst.
func (b *Burst) Mark(now time.Time, settle time.Duration) {
	if b.Start.IsZero() || (settle > 0 && now.Sub(b.Changed) >= settle) {
		b.Start = now
	}
	b.Changed = now
}

// Wait returns how long what waits for the burst must still wait at now: until the slice has gone
// a settle without a change, but never more than SettleCapFactor settles after its burst began.
// When the cap is what ends the wait, the next wait counts from now.
func (b *Burst) Wait(now time.Time, settle time.Duration) time.Duration {
	if settle <= 0 {
		return 0
	}
	quiet := b.Changed.Add(settle)
	if !now.Before(quiet) {
		return 0
	}
	capped := b.Start.Add(SettleCapFactor * settle)
	if !now.Before(capped) {
		b.Start = now
		return 0
	}
	if capped.Before(quiet) {
		return capped.Sub(now)
	}
	return quiet.Sub(now)
}
