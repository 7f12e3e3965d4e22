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

package tpuenv

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/ray-tpu/tpu-slice-operator/internal/constants"
	"github.com/ray-tpu/tpu-slice-operator/internal/naming"
)

// What Linux lets a container's process start with (docs/spec.md §4, "Every admitted Pod can
// start"). The kubelet passes every env entry, valueFrom ones resolved, to the container's
// execve: one entry longer than MaxEnvEntry, or arguments and environment together beyond
// ExecBudget, and the container never starts (E2BIG, "argument list too long").
const (
	// MaxEnvEntry is the longest one "NAME=value" string may be, its NUL included: Linux's
	// MAX_ARG_STRLEN, 32 pages of 4 KiB.
	MaxEnvEntry = 32 * 4096
	// execLimit is what Linux allows argv and envp together, strings and pointers: a quarter of
	// the stack limit, 2 MiB at the default 8 MiB.
	execLimit = 2 << 20
	// ExecReserve is left of execLimit for what the webhook cannot see: the image's ENV, the
	// Service links and variables the kubelet adds, the values of valueFrom entries of the user's.
	ExecReserve = 256 << 10
	// ExecBudget is what the arguments and environment the webhook can see may take.
	ExecBudget = execLimit - ExecReserve
)

// DefaultClusterDomain is the cluster DNS domain the kubelet uses unless told otherwise
// (--cluster-domain).
const DefaultClusterDomain = "cluster.local"

// DNSSearchDomain returns the DNS search domain under which the hostnames of the Pods of the
// headless Service subdomain in namespace resolve: "<subdomain>.<namespace>.svc.<clusterDomain>".
// A Pod whose host lists take the short form (bare hostnames) gets it in spec.dnsConfig.searches.
func DNSSearchDomain(subdomain, namespace, clusterDomain string) string {
	return subdomain + "." + namespace + ".svc." + strings.TrimSuffix(clusterDomain, ".")
}

// ShortHostNames reports whether the host lists of vals, for Pods of n TPU containers, name each
// host by its bare hostname ("<g>-<r>-<h>", resolved through the search domain DNSSearchDomain
// that Apply adds to the Pod) instead of "<g>-<r>-<h>.<subdomain>": when the qualified lists
// would not fit in one environment entry (MaxEnvEntry). The choice is a function of vals and n
// alone, so the webhook, the ConfigMap, Strip and the reconciler all make the same one.
func ShortHostNames(vals Values, n int) bool {
	if !vals.multiHost() {
		return false
	}
	hostnames, processes := hostListEntries(vals, n, false)
	return hostnames > MaxEnvEntry || processes > MaxEnvEntry
}

// HostListsFit returns nil when the host lists of vals for Pods of n TPU containers fit, in the
// form ShortHostNames chooses, in one environment entry each; otherwise an error that says which
// list, how long it would be and what would make it fit. No form serves such a Pod: its
// container could not start, so the webhook denies it (docs/spec.md §4). The TorchTPU addresses
// are not checked: they are left out when they do not fit (torchAddressesFit).
//
// It costs O(hosts) arithmetic and builds no list.
func HostListsFit(vals Values, n int) error {
	if !vals.multiHost() && !processAddressesApply(vals, n) {
		return nil
	}
	short := ShortHostNames(vals, n)
	hostnames, processes := hostListEntries(vals, n, short)
	name, size := constants.EnvWorkerHostnames, hostnames
	if processes > hostnames {
		name, size = constants.EnvProcessAddresses, processes
	}
	if size <= MaxEnvEntry {
		return nil
	}
	hint := "use a shorter worker group name or fewer hosts per slice"
	if name == constants.EnvProcessAddresses && n > 1 {
		hint = fmt.Sprintf("request the host's TPU chips in one container instead of %d (one libtpu process per host), use a shorter worker group name, or fewer hosts per slice", n)
	}
	return fmt.Errorf("%s of a slice of %d hosts with %d TPU container(s) per Pod would be %d bytes even with bare hostnames (%q): more than the %d bytes Linux allows one environment entry, so the container could not start; %s",
		name, vals.Hosts, n, size, naming.Hostname(vals.GroupName, vals.ReplicaIndex, vals.Hosts-1), MaxEnvEntry, hint)
}

// hostListEntries returns the lengths of the entries "TPU_WORKER_HOSTNAMES=..." and
// "TPU_PROCESS_ADDRESSES=..." (NUL included; 0 for a list the Pods do not get) of vals for Pods
// of n TPU containers, with bare hostnames when short.
func hostListEntries(vals Values, n int, short bool) (hostnames, processes int64) {
	if vals.multiHost() {
		hostnames = listEntry(constants.EnvWorkerHostnames, vals, short, 1, -1)
	}
	if processAddressesApply(vals, n) {
		processes = listEntry(constants.EnvProcessAddresses, vals, short, int64(n), constants.ProcessPortBase)
	}
	return hostnames, processes
}

// listEntry returns the length of the environment entry "<name>=<list>" with its NUL, where list
// names, comma-joined, for every host h then each p < per, hostAddr(vals, h, short) followed,
// when portBase >= 0, by ":<portBase+p>".
func listEntry(name string, vals Values, short bool, per, portBase int64) int64 {
	var ports int64
	if portBase >= 0 {
		for p := range per {
			ports += 1 + int64(len(strconv.FormatInt(portBase+p, 10)))
		}
	}
	total := int64(len(name)) + 2
	for h := range max(vals.Hosts, 1) {
		total += per*int64(len(hostAddr(vals, h, short))) + ports
	}
	return total + int64(max(vals.Hosts, 1))*per - 1
}

// hostAddr is how the host lists of vals name host h: "localhost" on a single host, its bare
// hostname in the short form, else "<hostname>.<subdomain>".
func hostAddr(vals Values, h int32, short bool) string {
	switch {
	case !vals.multiHost():
		return "localhost"
	case short:
		return naming.Hostname(vals.GroupName, vals.ReplicaIndex, h)
	default:
		return naming.Hostname(vals.GroupName, vals.ReplicaIndex, h) + "." + vals.Subdomain
	}
}

// ExecFits returns nil when every TPU container of pod, as Apply(pod, vals, tpuContainers) left
// it, can be started by Linux: each environment entry within MaxEnvEntry and the command,
// arguments and environment together within ExecBudget, counting the values of the host lists a
// container takes from the slice's ConfigMap and the $(VAR) references the kubelet expands. A
// valueFrom entry of the user's counts by its name only (its value is not known here; the
// reserve covers it).
func ExecFits(pod *corev1.Pod, vals Values, tpuContainers []int) error {
	lists := newHostLists(vals, len(tpuContainers))
	hostnames, processes := hostListEntries(vals, len(tpuContainers), lists.short)
	for _, i := range tpuContainers {
		c := &pod.Spec.Containers[i]
		known := make(map[string]int64, len(c.Env))
		var total int64
		for _, e := range c.Env {
			var size int64
			switch {
			case IsHostListsRef(e) && e.Name == constants.EnvWorkerHostnames:
				size = hostnames
			case IsHostListsRef(e) && e.Name == constants.EnvProcessAddresses:
				size = processes
			case IsHostListsRef(e):
				size = int64(len(e.Name)) + 2 + int64(len(lists.torchSlicebuilderAddresses()))
			case e.ValueFrom != nil:
				size = int64(len(e.Name)) + 2
			default:
				size = int64(len(e.Name)) + 2 + expandedLen(e.Value, known)
			}
			if size > MaxEnvEntry {
				return fmt.Errorf("container %q: environment variable %s would be %d bytes, more than the %d bytes Linux allows one environment entry: the container could not start",
					c.Name, e.Name, size, MaxEnvEntry)
			}
			known[e.Name] = size - int64(len(e.Name)) - 2
			total += size + 8
		}
		for _, arg := range slices.Concat(c.Command, c.Args) {
			total += expandedLen(arg, known) + 1 + 8
		}
		if total > ExecBudget {
			return fmt.Errorf("container %q: its command, arguments and environment would take %d bytes, more than the %d bytes this operator admits (Linux allows %d, of which %d are left for the image's and the kubelet's own variables): the container could not start",
				c.Name, total, ExecBudget, execLimit, ExecReserve)
		}
	}
	return nil
}

// expandedLen is the length of s once the kubelet has expanded its $(VAR) references to the
// variables known, of those lengths ($$ is a literal $; a reference to an unknown variable stays
// as written).
func expandedLen(s string, known map[string]int64) int64 {
	if !strings.Contains(s, "$") {
		return int64(len(s))
	}
	var n int64
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			n++
			continue
		}
		switch s[i+1] {
		case '$':
			n++
			i++
			continue
		case '(':
			if end := strings.IndexByte(s[i+2:], ')'); end >= 0 {
				if size, ok := known[s[i+2:i+2+end]]; ok {
					n += size
					i += 2 + end
					continue
				}
			}
		}
		n++
	}
	return n
}

// addDNSSearch appends search to the Pod's spec.dnsConfig.searches unless it is there. Under the
// default dnsPolicy (ClusterFirst) the kubelet appends these to the cluster's own search list.
func addDNSSearch(pod *corev1.Pod, search string) {
	if pod.Spec.DNSConfig == nil {
		pod.Spec.DNSConfig = &corev1.PodDNSConfig{}
	}
	if !slices.Contains(pod.Spec.DNSConfig.Searches, search) {
		pod.Spec.DNSConfig.Searches = append(pod.Spec.DNSConfig.Searches, search)
	}
}
