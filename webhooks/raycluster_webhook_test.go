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

package webhooks

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/placement"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
	"github.com/ray-tpu/tpu-slice-operator/internal/validation"
)

const (
	// wrongHostsBody is the error body of numOfHosts 2 in a v6e 4x4 group of 4-chip Pods.
	wrongHostsBody = "Invalid value: 2: topology 4x4 has 16 chips and each Pod requests 4, so the slice needs numOfHosts 4"
	// missingTopologyBody is the error body of a TPU group without the topology nodeSelector.
	missingTopologyBody = "Required value: nodeSelector cloud.google.com/gke-tpu-topology (or, for GKE subslicing and dynamic slicing, " +
		"annotation cloud.google.com/gke-tpu-slice-topology) is required: set it to the TPU slice topology, such as 4x4 or 2x2x4"
)

// invalidRayCluster is the status of the Invalid error refusing RayCluster "rc" for causes, whose
// message is message.
func invalidRayCluster(message string, causes ...metav1.StatusCause) *metav1.Status {
	return &metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusUnprocessableEntity,
		Reason:  metav1.StatusReasonInvalid,
		Message: message,
		Details: &metav1.StatusDetails{Name: clusterName, Group: "ray.io", Kind: "RayCluster", Causes: causes},
	}
}

// checkInvalid checks that err is nil when want is, else an Invalid error of status want.
func checkInvalid(t *testing.T, err error, want *metav1.Status) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Errorf("Error = %v, want none", err)
		}
		return
	}
	var status *apierrors.StatusError
	if !errors.As(err, &status) || !apierrors.IsInvalid(err) {
		t.Fatalf("Error = %v, want an Invalid *apierrors.StatusError", err)
	}
	got := status.Status()
	if diff := cmp.Diff(want, &got); diff != "" {
		t.Errorf("Error status (-want +got):\n%s", diff)
	}
}

func TestRayClusterWebhookValidateCreate(t *testing.T) {
	cases := map[string]struct {
		rc      *rayv1.RayCluster
		wantErr *metav1.Status
	}{
		"a multi-host TPU group whose numOfHosts matches its topology is allowed": {
			rc: cluster().TPUGroup(group, v6e, "4x4", 4, 4, 2).Obj(),
		},
		"a cluster without TPU groups is allowed": {
			rc: cluster().CPUGroup("cpu", 3).Obj(),
		},
		"a wrong numOfHosts in the second group is a field error naming topology, chips and the right count": {
			rc: cluster().CPUGroup("cpu", 1).TPUGroup(group, v6e, "4x4", 4, 2, 1).Obj(),
			wantErr: invalidRayCluster(`RayCluster.ray.io "rc" is invalid: spec.workerGroupSpecs[1].numOfHosts: `+wrongHostsBody,
				metav1.StatusCause{Type: metav1.CauseTypeFieldValueInvalid, Field: "spec.workerGroupSpecs[1].numOfHosts", Message: wrongHostsBody}),
		},
		"every invalid group is reported": {
			rc: cluster().TPUGroup(group, v6e, "4x4", 4, 2, 1).TPUGroup("tpu-b", v6e, "4x4", 4, 4, 1).
				WithoutNodeSelector(1, constants.TopologyNodeSelectorKey).Obj(),
			wantErr: invalidRayCluster(`RayCluster.ray.io "rc" is invalid: [spec.workerGroupSpecs[0].numOfHosts: `+wrongHostsBody+
				", spec.workerGroupSpecs[1].template.spec.nodeSelector[cloud.google.com/gke-tpu-topology]: "+missingTopologyBody+"]",
				metav1.StatusCause{Type: metav1.CauseTypeFieldValueInvalid, Field: "spec.workerGroupSpecs[0].numOfHosts", Message: wrongHostsBody},
				metav1.StatusCause{
					Type:    metav1.CauseTypeFieldValueRequired,
					Field:   "spec.workerGroupSpecs[1].template.spec.nodeSelector[cloud.google.com/gke-tpu-topology]",
					Message: missingTopologyBody,
				}),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			warnings, err := (&rayClusterWebhook{}).ValidateCreate(t.Context(), tc.rc)
			checkInvalid(t, err, tc.wantErr)
			if warnings != nil {
				t.Errorf("Warnings = %q, want none", warnings)
			}
		})
	}
}

func TestRayClusterWebhookValidateUpdate(t *testing.T) {
	// invalid is a cluster created before the operator was installed: 2 hosts for a 4-host slice.
	invalid := func() *testutil.RayClusterWrapper {
		return cluster().TPUGroup(group, v6e, "4x4", 4, 2, 1)
	}
	unchangedWarning := `worker group "tpu" is unchanged but invalid for TPU: spec.workerGroupSpecs[0].numOfHosts: ` + wrongHostsBody
	cases := map[string]struct {
		oldRC, newRC *rayv1.RayCluster
		wantErr      *metav1.Status
		wantWarnings admission.Warnings
	}{
		"scaling a valid cluster is allowed without warnings": {
			oldRC: cluster().TPUGroup(group, v6e, "4x4", 4, 4, 1).Obj(),
			newRC: cluster().TPUGroup(group, v6e, "4x4", 4, 4, 3).Obj(),
		},
		"scaling an invalid group whose TPU fields did not change is allowed with a warning": {
			oldRC:        invalid().Obj(),
			newRC:        invalid().Replicas(0, 3).Obj(),
			wantWarnings: admission.Warnings{unchangedWarning},
		},
		"changing numOfHosts of an invalid group to another wrong value is invalid": {
			oldRC: invalid().Obj(),
			newRC: invalid().NumOfHosts(0, 3).Obj(),
			wantErr: invalidRayCluster(`RayCluster.ray.io "rc" is invalid: spec.workerGroupSpecs[0].numOfHosts: Invalid value: 3: `+
				"topology 4x4 has 16 chips and each Pod requests 4, so the slice needs numOfHosts 4",
				metav1.StatusCause{
					Type:    metav1.CauseTypeFieldValueInvalid,
					Field:   "spec.workerGroupSpecs[0].numOfHosts",
					Message: "Invalid value: 3: topology 4x4 has 16 chips and each Pod requests 4, so the slice needs numOfHosts 4",
				}),
		},
		"a new invalid group next to an unchanged invalid one is invalid, with the warning for the old one": {
			oldRC: invalid().Obj(),
			newRC: invalid().TPUGroup("tpu-b", v6e, "4x4", 4, 2, 1).Obj(),
			wantErr: invalidRayCluster(`RayCluster.ray.io "rc" is invalid: spec.workerGroupSpecs[1].numOfHosts: `+wrongHostsBody,
				metav1.StatusCause{Type: metav1.CauseTypeFieldValueInvalid, Field: "spec.workerGroupSpecs[1].numOfHosts", Message: wrongHostsBody}),
			wantWarnings: admission.Warnings{unchangedWarning},
		},
		"fixing an invalid group is allowed": {
			oldRC: invalid().Obj(),
			newRC: invalid().NumOfHosts(0, 4).Obj(),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			warnings, err := (&rayClusterWebhook{}).ValidateUpdate(t.Context(), tc.oldRC, tc.newRC)
			checkInvalid(t, err, tc.wantErr)
			if diff := cmp.Diff(tc.wantWarnings, warnings); diff != "" {
				t.Errorf("Warnings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRayClusterWebhookValidateDeleteAllows(t *testing.T) {
	// Even a cluster its create would refuse.
	rc := cluster().TPUGroup(group, v6e, "4x4", 4, 2, 1).Obj()
	warnings, err := (&rayClusterWebhook{}).ValidateDelete(t.Context(), rc)
	if err != nil || warnings != nil {
		t.Errorf("ValidateDelete() = %q, %v; want no warnings and no error", warnings, err)
	}
}

// noTPUNodes is a Node lister of a cluster without TPU Nodes yet.
type noTPUNodes struct{}

func (noTPUNodes) ListNodes(context.Context, map[string]string) ([]placement.Node, error) {
	return nil, nil
}

func TestRayClusterWebhookReturnsWarnings(t *testing.T) {
	subsliced := func() *testutil.RayClusterWrapper {
		return cluster().TPUGroup(group, v6e, "4x4", 4, 2, 1).GroupAnnotation(0, constants.SliceTopologyAnnotation, "2x4")
	}
	noNodes := `worker group "tpu": subslice 2x4 targets no Nodes yet (nodeSelector cloud.google.com/gke-tpu-accelerator=tpu-v6e-slice, ` +
		"cloud.google.com/gke-tpu-topology=4x4): Pods created before such Nodes exist cannot be kept on a GCE topology domain, " +
		"so its Pods are kept on one node pool (cloud.google.com/gke-nodepool), which no other subslice can then share"
	w := &rayClusterWebhook{validator: validation.New(validation.Options{Nodes: noTPUNodes{}})}
	cases := map[string]struct {
		rc           *rayv1.RayCluster
		wantErr      *metav1.Status
		wantWarnings admission.Warnings
	}{
		"a subsliced group targeting no Nodes yet is allowed with a warning": {
			rc:           subsliced().Obj(),
			wantWarnings: admission.Warnings{noNodes},
		},
		"the warning comes with the refusal of another group": {
			rc: subsliced().TPUGroup("tpu-b", v6e, "4x4", 4, 2, 1).Obj(),
			wantErr: invalidRayCluster(`RayCluster.ray.io "rc" is invalid: spec.workerGroupSpecs[1].numOfHosts: `+wrongHostsBody,
				metav1.StatusCause{Type: metav1.CauseTypeFieldValueInvalid, Field: "spec.workerGroupSpecs[1].numOfHosts", Message: wrongHostsBody}),
			wantWarnings: admission.Warnings{noNodes},
		},
		"a Kueue-queued cluster gets no Node warning": {
			rc: subsliced().Label(constants.KueueQueueNameLabel, "lq").Obj(),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			warnings, err := w.ValidateCreate(t.Context(), tc.rc)
			checkInvalid(t, err, tc.wantErr)
			if diff := cmp.Diff(tc.wantWarnings, warnings); diff != "" {
				t.Errorf("Warnings (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("an update changing the group returns its warning", func(t *testing.T) {
		warnings, err := w.ValidateUpdate(t.Context(), cluster().TPUGroup(group, v6e, "4x4", 4, 4, 1).Obj(), subsliced().Obj())
		checkInvalid(t, err, nil)
		if diff := cmp.Diff(admission.Warnings{noNodes}, warnings); diff != "" {
			t.Errorf("Warnings (-want +got):\n%s", diff)
		}
	})
}
