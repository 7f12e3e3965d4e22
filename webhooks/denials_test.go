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

// The denial catalog: docs/operations.md lists every message the Pod webhook denies a Pod with,
// one heading each, under "Pod webhook: permanent denials" (HTTP 403) and "Pod webhook: transient
// denials" (HTTP 429). TestDenialCatalog runs the webhook, with the real allocator on a fake API
// server, through one case per denial and checks the messages it answers against those headings,
// so that neither side can change without the other.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	rayutils "github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	tpuv1alpha1 "github.com/ray-tpu/tpu-slice-operator/api/v1alpha1"
	"github.com/ray-tpu/tpu-slice-operator/internal/allocator"
	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/metrics"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
	"github.com/ray-tpu/tpu-slice-operator/internal/placement"
	"github.com/ray-tpu/tpu-slice-operator/internal/testutil"
)

// catalogFile is the document whose headings are the denial catalog.
const catalogFile = "../docs/operations.md"

// The catalog's sections, by the HTTP code of the denials they list.
var catalogSections = map[string]int32{
	"### Pod webhook: permanent denials": http.StatusForbidden,
	"### Pod webhook: transient denials": http.StatusTooManyRequests,
}

// catchAllPrefix starts the heading of the transient denial of an error no other heading names.
const catchAllPrefix = "Any other "

// catalogEntry is one heading of the catalog.
type catalogEntry struct {
	// message is the heading's message, as written (between its first pair of backticks).
	message string
	// code is the HTTP code of its section.
	code int32
	// pattern matches the messages it documents: <placeholders> and ... stand for any text.
	pattern *regexp.Regexp
	// catchAll marks the heading of unexpected errors ("Any other `<error>; transient, ...`").
	catchAll bool
}

// headingPlaceholder matches what a heading leaves open: a <name> or an ellipsis.
var headingPlaceholder = regexp.MustCompile(`<[^<>]+>|\.\.\.`)

// readCatalog returns the denial headings of path.
func readCatalog(t *testing.T, path string) []catalogEntry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var out []catalogEntry
	var code int32
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		line := scanner.Text()
		if strings.HasPrefix(line, "### ") || strings.HasPrefix(line, "## ") {
			code = catalogSections[line]
			continue
		}
		heading, ok := strings.CutPrefix(line, "#### ")
		if code == 0 || !ok {
			continue
		}
		_, quoted, found := strings.Cut(heading, "`")
		message, _, closed := strings.Cut(quoted, "`")
		if !found || !closed {
			t.Errorf("%s: denial heading %q quotes no message in backticks", path, heading)
			continue
		}
		out = append(out, catalogEntry{message: message, code: code, pattern: headingPattern(message),
			catchAll: strings.HasPrefix(heading, catchAllPrefix)})
	}
	if err := scanner.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("%s has no denial headings under %v", path, catalogSections)
	}
	return out
}

// headingPattern returns the regular expression of a heading's message: its text literally, each
// placeholder any non-empty text, the whole message matched.
func headingPattern(message string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString(`\A`)
	last := 0
	for _, loc := range headingPlaceholder.FindAllStringIndex(message, -1) {
		b.WriteString(regexp.QuoteMeta(message[last:loc[0]]))
		b.WriteString(`.+`)
		last = loc[1]
	}
	b.WriteString(regexp.QuoteMeta(message[last:]))
	b.WriteString(`\z`)
	return regexp.MustCompile(b.String())
}

// catalogCase is one way to get a Pod denied.
type catalogCase struct {
	pod *corev1.Pod
	// objects are on the API server (the cache reads the same).
	objects []client.Object
	// faults are the API server's failures.
	faults interceptor.Funcs
	// nodes lists the TPU Nodes (none when nil).
	nodes placement.NodeLister
	// claimer, when set, claims instead of the allocator (claim forwarding's Router does).
	claimer *stubClaimer
	// maxHosts, admissionTimeout and claimTimeout configure the webhook and the allocator (the
	// defaults when zero).
	maxHosts                       int32
	admissionTimeout, claimTimeout time.Duration
	dryRun                         bool
	// unexpected says the error is one the webhook does not anticipate: the catalog's catch-all.
	unexpected bool
}

// catalogCluster returns the RayCluster of the catalog's cases: group "tpu" of replicas slices
// of a v6e 4x4 slice of 4 hosts (multiHostPod).
func catalogCluster(replicas int32) *testutil.RayClusterWrapper {
	return cluster().TPUGroup(group, v6e, "4x4", 4, 4, replicas)
}

// unseenClaims returns the slice of replica 0 holding each of its hosts' IDs with a claim whose
// Pod has not been seen yet: the allocator never takes such a claim over.
func unseenClaims(hosts int32) *testutil.SliceWrapper {
	s := testutil.MakeSlice(naming.SliceName(clusterName, group, 0), testNS, clusterName, clusterUID, group, 0, hosts).SelectorLabels()
	for id := range hosts {
		s.Claim(id, fmt.Sprintf("pending-%d", id), "", "")
	}
	return s
}

// faultOn returns faults that answer err to every call of verb ("get", "list" or "create") on an
// object or list for which of reports true.
func faultOn(verb string, of func(runtime.Object) bool, err error) interceptor.Funcs {
	return interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if verb == "get" && of(obj) {
				return err
			}
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if verb == "list" && of(list) {
				return err
			}
			return c.List(ctx, list, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if verb == "create" && of(obj) {
				return err
			}
			return c.Create(ctx, obj, opts...)
		},
	}
}

// The objects faults apply to.
func isRayCluster(obj runtime.Object) bool {
	_, ok := obj.(*rayv1.RayCluster)
	return ok
}

func isSlice(obj runtime.Object) bool {
	switch obj.(type) {
	case *tpuv1alpha1.TPUSliceAssignment, *tpuv1alpha1.TPUSliceAssignmentList:
		return true
	}
	return false
}

func isNodeList(obj runtime.Object) bool {
	_, ok := obj.(*corev1.NodeList)
	return ok
}

func isPodList(obj runtime.Object) bool {
	_, ok := obj.(*corev1.PodList)
	return ok
}

// malformedSliceReads makes every slice read carry a stored line that does not parse, as the
// status decoder reports one (a status holding such lines cannot be written to the fake client).
func malformedSliceReads() interceptor.Funcs {
	const line = `workers line 1: "x y z" is not "<id> <token> [<pod> <uid>]"`
	return interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := c.List(ctx, list, opts...); err != nil {
				return err
			}
			if l, ok := list.(*tpuv1alpha1.TPUSliceAssignmentList); ok {
				for i := range l.Items {
					l.Items[i].Status.MalformedLines = []string{line}
				}
			}
			return nil
		},
	}
}

// blockingClusterReads makes every RayCluster read wait until its context ends.
func blockingClusterReads() interceptor.Funcs {
	return interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*rayv1.RayCluster); ok {
				<-ctx.Done()
				return ctx.Err()
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}
}

// catalogCases are the denials of the Pod webhook, one case at least per heading of the catalog.
func catalogCases() map[string]catalogCase {
	forbiddenErr := apierrors.NewForbidden(schema.GroupResource{Group: "tpu.ray.io", Resource: "tpusliceassignments"}, "",
		errors.New("RBAC: access denied"))
	// A Pod that carries the identity and claim token of worker 2 of replica 0, copied or reinvoked.
	carrying := multiHostPod().TPUIdentity(group, 0, 2).Annotation(tpuv1alpha1.ClaimTokenAnnotation, "token-0").Obj()
	// A RayCluster of the same name, re-created: another UID.
	recreated := catalogCluster(1).UID("rc-uid-3")
	return map[string]catalogCase{
		// Permanent: the Pod, its RayCluster or the group must be fixed.
		"a Pod without topology": {
			pod: testutil.MakeWorkerPod(testNS, clusterName, clusterUID, group).TPU(4).Obj(),
		},
		"a topology that does not parse":                  {pod: tpuWorkerPod(v6e, "4x0", 4).Obj()},
		"a 3-D topology for a 2-D accelerator":            {pod: tpuWorkerPod(v6e, "2x2x2", 4).Obj()},
		"chips per Pod that do not divide the topology's": {pod: tpuWorkerPod(v6e, "4x4", 3).Obj()},
		"more chips per Pod than the topology has":        {pod: tpuWorkerPod(v6e, "2x2", 8).Obj()},
		"an empty subslice topology annotation": {
			pod: multiHostPod().Annotation(constants.SliceTopologyAnnotation, "").Obj(),
		},
		"a subslice that does not fit in its node pool's topology": {
			pod: multiHostPod().Annotation(constants.SliceTopologyAnnotation, "8x2").Obj(),
		},
		"a slice of more hosts than --max-slice-hosts": {pod: multiHostPod().Obj(), maxHosts: 2},
		// docs/spec.md §4, "Every admitted Pod can start" (issue 44).
		"host lists no environment entry holds (tpu7x, 2,304 hosts, 4 one-chip containers)": {
			pod: tpuWorkerPod(v7x, "16x24x24", 1).Container("ray-worker-1", 1).Container("ray-worker-2", 1).Container("ray-worker-3", 1).Obj(),
		},
		"an environment entry of the user's over 128 KiB": {
			pod: multiHostPod().Env(0, "BIG", strings.Repeat("x", 130<<10)).Obj(), objects: []client.Object{catalogCluster(1).Obj()},
		},
		"a KubeRay index label that is not a number": {
			pod: multiHostPod().Label(rayutils.RayWorkerReplicaIndexKey, "one").Obj(),
		},
		"a RayCluster name too long for the headless Service": {
			pod: testutil.MakeWorkerPod(testNS, tooLongCluster, clusterUID, group).Topology(v6e, "4x4").TPU(4).Obj(),
		},
		"an affinity-key annotation that is not a label key": {
			pod: multiHostPod().Annotation(constants.AffinityTopologyKeyAnnotation, "not a key!").Obj(),
		},
		"no such RayCluster": {pod: multiHostPod().Obj()},
		"a RayCluster the manager may not read": {
			pod: multiHostPod().Obj(), objects: []client.Object{catalogCluster(1).Obj()},
			faults: faultOn("get", isRayCluster, apierrors.NewForbidden(schema.GroupResource{Group: "ray.io", Resource: "rayclusters"},
				clusterName, errors.New("RBAC: access denied"))),
		},
		"a Pod of a deleted RayCluster of the same name": {
			pod: multiHostPod().Obj(), objects: []client.Object{recreated.Obj()},
		},
		"a group that does not exist": {
			pod: multiHostPod().Obj(), objects: []client.Object{cluster().TPUGroup("other", v6e, "4x4", 4, 4, 1).Obj()},
		},
		"a Pod whose topology disagrees with numOfHosts": {
			pod: multiHostPod().Obj(), objects: []client.Object{catalogCluster(1).NumOfHosts(0, 2).Obj()},
		},
		"a new topology while the old replicas run": {
			pod:     multiHostPod().Obj(),
			objects: []client.Object{catalogCluster(1).Obj(), unseenClaims(2).Obj()},
		},
		"KubeRay indexes beyond the desired replicas": {
			pod: multiHostPod().KubeRayIndexes(3, "tpu-x7k2p", 0).Obj(), objects: []client.Object{catalogCluster(1).Obj()},
		},
		"a KubeRay host index beyond the slice": {
			pod: multiHostPod().KubeRayIndexes(0, "tpu-x7k2p", 7).Obj(), objects: []client.Object{catalogCluster(1).Obj()},
		},
		"a create of a KubeRay replica already replaced": {
			pod: multiHostPod().KubeRayIndexes(0, "tpu-old", 0).Obj(),
			objects: []client.Object{catalogCluster(1).Obj(), func() *tpuv1alpha1.TPUSliceAssignment {
				s := unseenClaims(4).ReplicaName("tpu-new")
				s.Spec.ReplacedReplicaNames = []string{"tpu-old"}
				return s.Obj()
			}()},
		},
		"a slice name taken by another group": {
			pod: multiHostPod().Obj(),
			objects: []client.Object{catalogCluster(1).Obj(),
				testutil.MakeSlice(naming.SliceName(clusterName, group, 0), testNS, "other", "other-uid", "g2", 5, 4).Obj()},
		},
		"a slice write the API server refuses": {
			pod: multiHostPod().Obj(), objects: []client.Object{catalogCluster(1).Obj()},
			faults: faultOn("create", isSlice, forbiddenErr),
		},
		"a slice read the API server refuses": {
			pod:     multiHostPod().KubeRayIndexes(0, "tpu-x7k2p", 0).Obj(),
			objects: []client.Object{catalogCluster(1).Obj(), unseenClaims(4).ReplicaName("tpu-x7k2p").Obj()},
			faults:  faultOn("get", isSlice, forbiddenErr),
		},
		"a record of a Pod's identity the API server refuses": {
			pod: multiHostPod().Obj(),
			objects: []client.Object{catalogCluster(1).Obj(),
				multiHostPod().Named("rc-tpu-worker-x7k2p").UID("uid-x7k2p").TPUIdentity(group, 0, 1).Obj()},
			faults: faultOn("create", isSlice, forbiddenErr),
		},
		"a Pod list the API server refuses": {
			pod: multiHostPod().Obj(), objects: []client.Object{catalogCluster(1).Obj()},
			faults: faultOn("list", isPodList, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("RBAC: access denied"))),
		},

		// Transient: the Pod's creator retries as is.
		"every slice fully claimed": {
			pod: multiHostPod().Obj(), objects: []client.Object{catalogCluster(1).Obj(), unseenClaims(4).Obj()},
		},
		"a group at zero replicas": {pod: multiHostPod().Obj(), objects: []client.Object{catalogCluster(0).Obj()}},
		"a KubeRay host index another Pod holds": {
			pod:     multiHostPod().KubeRayIndexes(0, "tpu-x7k2p", 1).Obj(),
			objects: []client.Object{catalogCluster(1).Obj(), unseenClaims(4).ReplicaName("tpu-x7k2p").Obj()},
		},
		"a new KubeRay replica while the old one runs": {
			pod:     multiHostPod().KubeRayIndexes(0, "tpu-new", 0).Obj(),
			objects: []client.Object{catalogCluster(1).Obj(), unseenClaims(4).ReplicaName("tpu-old").Obj()},
		},
		"a slice with stored lines that do not parse": {
			pod: multiHostPod().Obj(), objects: []client.Object{catalogCluster(1).Obj(), unseenClaims(4).Obj()},
			faults: malformedSliceReads(),
		},
		"a failed check of the identity the Pod carries": {
			pod: carrying, objects: []client.Object{catalogCluster(1).Obj()},
			faults: faultOn("get", isSlice, errors.New("etcd timeout")),
		},
		"a claim past its deadline": {
			pod: multiHostPod().Obj(), objects: []client.Object{catalogCluster(1).Obj()},
			faults:       faultOn("create", isSlice, apierrors.NewServiceUnavailable("etcd leader changed")),
			claimTimeout: 100 * time.Millisecond,
		},
		"an admission past its deadline": {
			pod: multiHostPod().Obj(), objects: []client.Object{catalogCluster(1).Obj()},
			faults: blockingClusterReads(), admissionTimeout: 100 * time.Millisecond,
		},
		"a RayCluster read that fails": {
			pod: multiHostPod().Obj(), objects: []client.Object{catalogCluster(1).Obj()},
			faults: faultOn("get", isRayCluster, errors.New("connection refused")),
		},
		"a dry run whose slices cannot be listed": {
			pod: multiHostPod().Obj(), objects: []client.Object{catalogCluster(1).Obj()}, dryRun: true,
			faults: faultOn("list", isSlice, errors.New("cache not synced")),
		},
		"a dry run of a new slice whose TPU Nodes cannot be listed": {
			pod: multiHostPod().Obj(), objects: []client.Object{catalogCluster(1).Obj()}, dryRun: true,
			faults: faultOn("list", isNodeList, errors.New("cache not synced")),
		},
		"TPU Nodes that cannot be listed for a subslice": {
			pod: subslicePod().Obj(), objects: []client.Object{catalogCluster(1).Obj()},
			nodes: &fakeNodes{err: errors.New("cache not synced")},
		},
		"an error of claim forwarding that is no denial": {
			pod: multiHostPod().Obj(), claimer: &stubClaimer{err: errors.New("dial tcp 10.0.0.7:9443: connection refused")},
			unexpected: true,
		},
	}
}

// review runs the Pod webhook as the webhook server does on a create of tc.pod, and returns the
// status it answers.
func (tc catalogCase) review(t *testing.T) *metav1.Status {
	t.Helper()
	c := testutil.NewClientBuilder().WithObjects(tc.objects...).WithInterceptorFuncs(tc.faults).Build()
	var claimer Claimer
	var planner Planner
	if tc.claimer != nil {
		claimer, planner = tc.claimer, tc.claimer
	} else {
		a := allocator.New(c, c, allocator.Options{Timeout: tc.claimTimeout, MaxSliceHosts: tc.maxHosts})
		claimer, planner = a, a
	}
	w := &podWebhook{planner: planner, claimer: claimer, clusters: c, live: c, metrics: metrics.New(), nodes: tc.nodes, maxHosts: tc.maxHosts, timeout: tc.admissionTimeout}
	resp := (&admission.Webhook{Handler: w}).Handle(quietContext(t), createRequest(t, tc.pod, tc.dryRun))
	if resp.Allowed || resp.Result == nil {
		t.Fatalf("The webhook admitted the Pod (%+v), want a denial", resp.Result)
	}
	return resp.Result
}

// TestDenialCatalog checks that every denial of the Pod webhook has a heading in
// docs/operations.md, in the section of its HTTP code, and that every heading there is a denial the
// webhook answers.
func TestDenialCatalog(t *testing.T) {
	catalog := readCatalog(t, catalogFile)
	produced := make([]bool, len(catalog))
	cases, ran := catalogCases(), 0
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ran++
			got := tc.review(t)
			t.Logf("Denied: %d %s", got.Code, got.Message)
			var matched []string
			for i, e := range catalog {
				if e.catchAll == tc.unexpected && e.code == got.Code && e.pattern.MatchString(got.Message) {
					produced[i] = true
					matched = append(matched, e.message)
				}
			}
			switch {
			case len(matched) == 0:
				t.Errorf("Denial %d %q has no heading in %s (under %q)", got.Code, got.Message, catalogFile, sectionOf(got.Code))
			case len(matched) > 1:
				t.Errorf("Denial %d %q matches %d headings of %s, want one: %q", got.Code, got.Message, len(matched), catalogFile, matched)
			}
		})
	}
	if ran < len(cases) {
		t.Logf("Ran %d of %d cases (-run): not checking that every heading is produced", ran, len(cases))
		return
	}
	for i, e := range catalog {
		if !produced[i] {
			t.Errorf("Heading %q of %s (HTTP %d) is no denial the webhook answers in these cases", e.message, catalogFile, e.code)
		}
	}
}

// sectionOf returns the catalog section of the denials of HTTP code.
func sectionOf(code int32) string {
	for section, c := range catalogSections {
		if c == code {
			return section
		}
	}
	return "no section"
}
