#!/bin/sh
# Reintroduce one store bug of issue 13 (or a later one) and run the
# simulation's make-test budget on it (seeds 1, 2, 5, 6 plain; 3, 4 with disk
# faults; 20000 steps), or the seeds SEEDS says, with kvtsim's other flags:
#   tests/sim/mutations/run.sh 5a
#   SEEDS=33 tests/sim/mutations/run.sh 10 --evict-policy keep
# in a scratch copy of the tree (it patches the store, builds kvtsim, runs,
# then takes the patch back). Exit 0: the simulation found the bug.
set -u
cd "$(dirname "$0")/../../.."
p=tests/sim/mutations/$1.patch
git apply "$p" || exit 2
make -s build/kvtsim >/dev/null || { git apply -R "$p"; exit 2; }
found=1
m=$1
shift
for s in ${SEEDS:-1 2 3 4 5 6}; do
    f=""; [ -z "${SEEDS:-}" ] && { [ $s = 3 ] || [ $s = 4 ]; } && f="--faults"
    if ! build/kvtsim --seed $s --steps 20000 $f "$@" 2>/dev/null | grep FAILED; then continue; fi
    found=0
    break
done
git apply -R "$p"
make -s build/kvtsim >/dev/null
[ $found = 0 ] || echo "mutation $m: not found within the make test budget"
exit $found
