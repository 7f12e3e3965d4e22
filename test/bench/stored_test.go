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

package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

// encodedSize is the length of obj's protobuf encoding, as the API server stores it.
func encodedSize(t *testing.T, obj interface{ Marshal() ([]byte, error) }) int {
	t.Helper()
	data, err := obj.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return len(data)
}

func TestSumStored(t *testing.T) {
	small := testutil.MakeWorkerPod("ns", "rc", "uid", "tpu").TPU(4).Obj()
	big := testutil.MakeWorkerPod("ns", "rc", "uid", "tpu").TPU(4).Env(0, "TPU_WORKER_HOSTNAMES", strings.Repeat("rc-tpu-0-0.rc-headless,", 1024)).Obj()
	cm := corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "rc-tpu-0", Namespace: "ns"},
		Data:       map[string]string{"TPU_WORKER_HOSTNAMES": strings.Repeat("rc-tpu-0-0.rc-headless,", 1024)},
	}
	smallBytes, bigBytes, cmBytes := encodedSize(t, small), encodedSize(t, big), encodedSize(t, &cm)
	testCases := map[string]struct {
		pods       []corev1.Pod
		configMaps []corev1.ConfigMap
		want       storedBytes
		wantFields string
	}{
		"a slice with nothing stored": {
			wantFields: "stored_pod_bytes=0 stored_configmap_bytes=0 stored_bytes_per_pod=0",
		},
		"Pods add up by their protobuf size": {
			pods: []corev1.Pod{*small, *big},
			want: storedBytes{pods: 2, podBytes: smallBytes + bigBytes},
			wantFields: fmt.Sprintf("stored_pod_bytes=%d stored_configmap_bytes=0 stored_bytes_per_pod=%d",
				smallBytes+bigBytes, (smallBytes+bigBytes)/2),
		},
		"the slice's ConfigMap is counted apart and shared out over its Pods": {
			pods:       []corev1.Pod{*small, *small, *small},
			configMaps: []corev1.ConfigMap{cm},
			want:       storedBytes{pods: 3, podBytes: 3 * smallBytes, configMaps: 1, configMapBytes: cmBytes},
			wantFields: fmt.Sprintf("stored_pod_bytes=%d stored_configmap_bytes=%d stored_bytes_per_pod=%d",
				3*smallBytes, cmBytes, (3*smallBytes+cmBytes)/3),
		},
	}
	for name, tc := range testCases {
		t.Run(name, func(t *testing.T) {
			got := sumStored(tc.pods, tc.configMaps)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(storedBytes{})); diff != "" {
				t.Errorf("sumStored (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantFields, got.fields("")); diff != "" {
				t.Errorf("fields (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestStoredBytesPlus(t *testing.T) {
	pages := []storedBytes{{pods: 100, podBytes: 1000}, {pods: 24, podBytes: 240}, {configMaps: 1, configMapBytes: 50}}
	var got storedBytes
	for _, p := range pages {
		got = got.plus(p)
	}
	want := storedBytes{pods: 124, podBytes: 1240, configMaps: 1, configMapBytes: 50}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(storedBytes{})); diff != "" {
		t.Errorf("plus over the pages (-want,+got):\n%s", diff)
	}
}

func TestS5Lines(t *testing.T) {
	lat := make([]time.Duration, 128)
	for i := range lat {
		lat[i] = 10 * time.Millisecond
		if i >= 64 {
			lat[i] = 15 * time.Millisecond
		}
	}
	r := bigResult{
		hosts: 128, pods: 128, wall: 4 * time.Second, baselineWall: time.Second, lat: lat,
		allocStats: allocStats{writes: 128}, statusBytes: 2048,
		stored:    storedBytes{pods: 128, podBytes: 128 * 4000, configMaps: 1, configMapBytes: 12800},
		write1:    writeStats{mean: 7 * time.Millisecond, p99: 9 * time.Millisecond},
		writeH:    writeStats{mean: 16 * time.Millisecond, p99: 20 * time.Millisecond},
		admission: floor{wall: 2 * time.Second},
		payload:   floor{wall: 3 * time.Second, stored: storedBytes{pods: 128, podBytes: 128 * 60000}},
		injection: floor{wall: 2500 * time.Millisecond, flatness: 1.1},
	}
	want := []string{
		"BENCH S5-floor hosts=128 write_1_ms=7.0 write_1_p99_ms=9.0 write_h_ms=16.0 write_h_p99_ms=20.0 payload_ratio=3.00 admission_ratio=2.00" +
			" injection_ratio=2.50 injection_flatness=1.10 payload_stored_pod_bytes=7680000 payload_stored_configmap_bytes=0 payload_stored_bytes_per_pod=60000",
		"BENCH S5 hosts=128 pods=128 ratio=4.00 flatness=1.50 p99_ms=15.0 status_kib=2.0 writes_per_pod=1.00 duplicates=0" +
			" stored_pod_bytes=512000 stored_configmap_bytes=12800 stored_bytes_per_pod=4100",
	}
	if diff := cmp.Diff(want, r.benchLines()); diff != "" {
		t.Errorf("benchLines (-want,+got):\n%s", diff)
	}
}
