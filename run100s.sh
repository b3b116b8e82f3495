T=$(cat /tmp/exp/tok)
S=""; for l in 10 30 50 70 90 110 130 150 170 190; do S="$S -e ${l}s/\$/X$1/"; done
FILES=""; for d in 60 61 62 63 64 65 66 67 68 69; do for i in 0 1 2 3 4 5 6 7 8 9; do FILES="$FILES d0$d/f0${d}0$i.txt"; done; done
curl -s -X POST -H "Authorization: Bearer $T" -H 'content-type: application/json' http://127.0.0.1:4199/runs \
  -d "{\"prompt\":\"p\",\"agent\":\"sh -c 'sed -i $S $FILES; sync; echo hgend \$(date +%s%N)'\"}" > /tmp/exp/run.json
