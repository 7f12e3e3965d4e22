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

// Package identity reads what links a TPU worker Pod to its claim (docs/spec.md §8): the TPU identity
// its spec carries (TPU_WORKER_ID, TPU_NAME, its owner), which cannot change after creation, and its
// claim-token annotation, a hint (docs/design.md, "What links a claim to its Pod").
package identity

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/topology"
)

// Identity is the place in a TPU slice that a Pod's spec gives it.
type Identity struct {
	// Cluster and ClusterUID name the Pod's RayCluster: its controller ownerReference (set by
	// KubeRay at creation), or, without one, the ray.io/cluster label and no UID.
	Cluster    string
	ClusterUID types.UID
	// Group and Replica come from TPU_NAME, "<group>-<replica>".
	Group   string
	Replica int32
	// WorkerID is the host ID from TPU_WORKER_ID (on tpu7x with several TPU containers, the first
	// container's value divided by their number).
	WorkerID int32
	// Hosts is the host count of the slice the Pod's topology and TPU resources describe, 0 when
	// they do not describe one.
	Hosts int32
}

// FromPod returns the TPU identity the Pod's spec carries, and false when it carries none: no TPU
// container, no literal TPU_WORKER_ID or TPU_NAME in the first one, or values that do not parse.
func FromPod(pod *corev1.Pod) (Identity, bool) {
	id, ok := fromSpec(pod, topology.TPUContainers(&pod.Spec))
	if !ok {
		return Identity{}, false
	}
	if slice, err := topology.FromPod(pod.Annotations, &pod.Spec); err == nil {
		id = id.inSlice(slice)
	}
	return id, true
}

// FromParsedPod is FromPod for a Pod whose slice the caller has already read with
// topology.FromPod: the Pod is not parsed again.
func FromParsedPod(pod *corev1.Pod, slice topology.Slice) (Identity, bool) {
	id, ok := fromSpec(pod, slice.TPUContainers)
	if !ok {
		return Identity{}, false
	}
	return id.inSlice(slice), true
}

// fromSpec reads the identity from the env of the first of the TPU containers tpu and the Pod's
// owner, without Hosts.
func fromSpec(pod *corev1.Pod, tpu []int) (Identity, bool) {
	if len(tpu) == 0 {
		return Identity{}, false
	}
	env := pod.Spec.Containers[tpu[0]].Env
	idValue, ok1 := literalEnv(env, constants.EnvWorkerID)
	name, ok2 := literalEnv(env, constants.EnvName)
	if !ok1 || !ok2 {
		return Identity{}, false
	}
	workerID, err := strconv.ParseInt(idValue, 10, 32)
	if err != nil || workerID < 0 {
		return Identity{}, false
	}
	group, replica, ok := ParseTPUName(name)
	if !ok {
		return Identity{}, false
	}
	id := Identity{Group: group, Replica: replica, WorkerID: int32(workerID)}
	if name, uid, ok := Owner(pod); ok {
		id.Cluster, id.ClusterUID = name, uid
	} else {
		id.Cluster = pod.Labels[rayutils.RayClusterLabelKey]
	}
	if id.Cluster == "" {
		return Identity{}, false
	}
	return id, true
}

// inSlice returns id with the host count of slice, the Pod's, and its worker ID per host: on
// tpu7x with several TPU containers TPU_WORKER_ID numbers containers, not hosts.
func (id Identity) inSlice(slice topology.Slice) Identity {
	id.Hosts = slice.Hosts
	if n := len(slice.TPUContainers); topology.IsV7x(slice.Accelerator) && n > 1 {
		id.WorkerID /= int32(n) //nolint:gosec // a Pod has far fewer than 2^31 containers.
	}
	return id
}

// Owner returns the name and UID of the RayCluster that controls pod (its controller
// ownerReference, set by KubeRay at creation and immutable in practice); ok is false when no
// RayCluster controls it. The UID tells a re-created cluster of the same name from the one before.
func Owner(pod *corev1.Pod) (name string, uid types.UID, ok bool) {
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil && ref.Kind == "RayCluster" {
		return ref.Name, ref.UID, true
	}
	return "", "", false
}

// OfClusterUID reports whether the identity's Pod may belong to the RayCluster with UID uid: its
// owner has that UID, or it names no owner (a Pod created by hand, which the RayCluster's name and
// the slice's spec alone place).
func (id Identity) OfClusterUID(uid types.UID) bool {
	return id.ClusterUID == "" || id.ClusterUID == uid
}

// SliceName is the TPUSliceAssignment the identity's worker ID belongs to.
func (id Identity) SliceName() string {
	return naming.SliceName(id.Cluster, id.Group, id.Replica)
}

// ParseTPUName splits a TPU_NAME value, "<group>-<replica>", at its last dash.
func ParseTPUName(name string) (group string, replica int32, ok bool) {
	i := strings.LastIndexByte(name, '-')
	if i < 1 {
		return "", 0, false
	}
	r, err := strconv.ParseInt(name[i+1:], 10, 32)
	if err != nil || r < 0 || name[i+1] == '+' {
		return "", 0, false
	}
	return name[:i], int32(r), true
}

// Token returns the Pod's claim-token annotation, "" without one or when the value cannot name a
// claim (tpuv1alpha1.ValidToken). It is a hint: a user or a copied manifest can set, edit or remove
// it (docs/spec.md §8).
//
// A token is proof only with its Pod (docs/spec.md §3.5, §8): a reserved ID is stored under the
// seal of its token (Seal), and only the Pod it is handed out to carries the secret itself. So
// Token returns the seal of a secret the Pod carries, the claim's stored token, and "" for a Pod
// that carries a seal (copied from a slice's status, which anyone who reads the slice can see:
// no hand-out ever gives one to a Pod).
func Token(pod *corev1.Pod) string {
	t := pod.Annotations[tpuv1alpha1.ClaimTokenAnnotation]
	switch {
	case !tpuv1alpha1.ValidToken(t), strings.HasPrefix(t, SealPrefix):
		return ""
	case strings.HasPrefix(t, SecretPrefix):
		return Seal(t)
	}
	return t
}

// CarriesSeal reports whether the Pod's claim-token annotation is a seal (Seal): one copied from a
// slice's status, since the operator gives no Pod a seal. Such a Pod proves no claim, and no claim
// is bound or adopted to it by its spec either (docs/spec.md §8).
func CarriesSeal(pod *corev1.Pod) bool {
	return strings.HasPrefix(pod.Annotations[tpuv1alpha1.ClaimTokenAnnotation], SealPrefix)
}

// SecretPrefix starts the token a reserved ID is handed out under, and SealPrefix the token its
// claim is stored under (Seal).
const (
	SecretPrefix = "s."
	SealPrefix   = "r."
)

// NewSecret returns a new secret token: SecretPrefix and 128 random bits.
func NewSecret() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand).
	return SecretPrefix + hex.EncodeToString(b)
}

// Seal returns the token a claim handed out under secret is stored under: SealPrefix and 128 bits
// of the secret's SHA-256. Reading a slice's status, which shows the seal, tells nothing of the
// secret.
func Seal(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return SealPrefix + hex.EncodeToString(sum[:16])
}

func literalEnv(env []corev1.EnvVar, name string) (string, bool) {
	for _, e := range env {
		if e.Name == name {
			return e.Value, e.ValueFrom == nil && e.Value != ""
		}
	}
	return "", false
}

// Cache field indexes on Pods, registered by the operator on its Pod informer.
const (
	// SliceIndex indexes a Pod by the slice its spec identity names (SliceName).
	SliceIndex = "tpu.ray.io/identity-slice"
	// TokenIndex indexes a Pod by its claim-token annotation.
	TokenIndex = "tpu.ray.io/claim-token"
)

// SliceIndexValue is the indexer function of SliceIndex.
func SliceIndexValue(obj client.Object) []string {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil
	}
	if id, ok := FromPod(pod); ok {
		return []string{id.SliceName()}
	}
	return nil
}

// TokenIndexValue is the indexer function of TokenIndex.
func TokenIndexValue(obj client.Object) []string {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil
	}
	if t := Token(pod); t != "" {
		return []string{t}
	}
	return nil
}
