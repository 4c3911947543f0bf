#!/usr/bin/env bash
# Captures the compute profiles of the benchmark models into profiles/, one
# model at a time (profiles taken side by side on a small machine overstate
# compute), then derives the paper-size ones from them. Run it on a quiet
# machine from trainers/:
#
#	eval "$(./setup.sh)" && scripts/profiles.sh
#
# Then `go run ./cmd/replaybench profiles` prints the table.
set -euo pipefail
cd "$(dirname "$0")/.."
go build -o /tmp/switchml-train ./cmd/train
go build -o /tmp/switchml-replaybench ./cmd/replaybench
# model:batch:repetitions
for spec in ncf:1024:3 deeplight:1024:3 lstm:8:3 resnet50:8:3 vgg19:2:3 bert:2:3 ssd:4:3 ugatit:1:1; do
	IFS=: read -r model batch reps <<<"$spec"
	echo "== $model (batch $batch, $reps repetitions)" >&2
	/tmp/switchml-train --model "$model" --batch "$batch" --profile-reps "$reps" --intra-op-threads 2 --profile-out "profiles/$model.json"
done
# The paper-size models (docs/models.md says where the sizes come from).
/tmp/switchml-replaybench derive --from profiles/deeplight.json --name deeplight-paper --unit features=371389089 \
	--note "DeepFwFM on Criteo at its real size: 33,762,577 feature ids (the Criteo feature count of Hetu's CTR examples, github.com/Hsword/Hetu examples/ctr/models) x embedding 10, plus one first-order weight each (DeepLight's main_all.py defaults), the bias and the 741 FwFM pair weights; the network is unchanged" \
	--out profiles/deeplight-paper.json
/tmp/switchml-replaybench derive --from profiles/lstm.json --name lstm-paper \
	--unit embedding=203128576 --unit lstm1=19415296 --unit lstm2=0 --unit softmax=203922047 \
	--note "the Google Billion Words LM of github.com/rdspring1/PyTorch_GBW_LM (after Jozefowicz et al. 2016): vocabulary 793,471 (Chelba et al. 2013), embedding 256, one LSTM layer of 2048 units with a 2048x256 projection, untied 256x793,471 softmax with bias" \
	--out profiles/lstm-paper.json
