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

package testutil

import (
	"fmt"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
)

// Event is an Event an EventRecorder recorded: the object it regards, as namespace/name, its type,
// reason and note.
type Event struct {
	Regarding    string
	Type, Reason string
	Note         string
}

// EventRecorder is a fake events.k8s.io recorder that keeps what it was given, in order, for a
// test to compare. Safe for concurrent use.
type EventRecorder struct {
	mu     sync.Mutex
	events []Event
}

// Eventf records an Event.
func (r *EventRecorder) Eventf(regarding, _ runtime.Object, eventtype, reason, _, note string, args ...any) {
	name := ""
	if m, err := meta.Accessor(regarding); err == nil {
		name = m.GetNamespace() + "/" + m.GetName()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, Event{Regarding: name, Type: eventtype, Reason: reason, Note: fmt.Sprintf(note, args...)})
}

// AnnotatedEventf records an Event; the annotations are dropped.
func (r *EventRecorder) AnnotatedEventf(regarding, related runtime.Object, _ map[string]string, eventtype, reason, action, note string, args ...any) {
	r.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

// Recorded returns the Events recorded so far.
func (r *EventRecorder) Recorded() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}
