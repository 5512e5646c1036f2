// The ReplicaSet controller's own sort, run on a snapshot of pods: for each controller clock
// given, how often each pod is among the first `diff` after sort.Sort over
// controller.ActivePodsWithRanks, with the pods listed in many random orders (the informer's
// cache lists a map, in no fixed order). Ranks are computed as replicaset.go's
// getPodsRankedByRelatedPodsOnSameNode computes them (unexported there; same lines here).
// Input (stdin) and output (stdout) are JSON; see tests/real_scale_in.py (oracle). The
// feature gates are the defaults, as the tests' kube-controller-manager runs them
// (PodDeletionCost on, LogarithmicScaleDown locked on).
package main

import (
	"encoding/json"
	"math/rand"
	"os"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubernetes/pkg/controller"
)

type input struct {
	Pods         []*v1.Pod `json:"pods"`
	Related      []*v1.Pod `json:"related"`
	Diff         int       `json:"diff"`
	Clocks       []string  `json:"clocks"`
	Permutations int       `json:"permutations"`
	Seed         int64     `json:"seed"`
}

type outcome struct {
	Clock   string         `json:"clock"`
	Deleted map[string]int `json:"deleted"`
	Runs    int            `json:"runs"`
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		panic(err)
	}
	podsOnNode := map[string]int{}
	for _, pod := range in.Related {
		if controller.IsPodActive(pod) {
			podsOnNode[pod.Spec.NodeName]++
		}
	}
	random := rand.New(rand.NewSource(in.Seed))
	var out []outcome
	for _, text := range in.Clocks {
		now, err := time.Parse(time.RFC3339Nano, text)
		if err != nil {
			panic(err)
		}
		result := outcome{Clock: text, Deleted: map[string]int{}, Runs: in.Permutations}
		for run := 0; run < in.Permutations; run++ {
			pods := append([]*v1.Pod(nil), in.Pods...)
			random.Shuffle(len(pods), func(i, j int) { pods[i], pods[j] = pods[j], pods[i] })
			ranks := make([]int, len(pods))
			for i, pod := range pods {
				ranks[i] = podsOnNode[pod.Spec.NodeName]
			}
			sorted := controller.ActivePodsWithRanks{Pods: pods, Rank: ranks, Now: metav1.NewTime(now)}
			if in.Diff < len(pods) {
				sort.Sort(sorted)
			}
			for _, pod := range sorted.Pods[:in.Diff] {
				result.Deleted[pod.Name]++
			}
		}
		out = append(out, result)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		panic(err)
	}
}
