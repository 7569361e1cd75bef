# Sourced by scripts/bench.sh and scripts/soak.sh: waiting for a quiet machine before a
# measurement, so that a number is not another build's.

# Busy CPU (all cores, in % of one core) over 2 seconds, from /proc/stat.
busy_percent() {
  local a b
  read -ra a < /proc/stat; sleep 2; read -ra b < /proc/stat
  local busy=$(( (b[1]+b[2]+b[3]+b[6]+b[7]+b[8]) - (a[1]+a[2]+a[3]+a[6]+a[7]+a[8]) ))
  echo $(( busy * 100 / (2 * $(getconf CLK_TCK)) ))
}

# wait_quiet SECONDS LOG NAME: waits until other processes use less than 20% of one core, for
# SECONDS at most; past that it runs anyway and says so, also in LOG. NAME prefixes the lines.
wait_quiet() {
  local limit=$1 log=$2 name=$3 waited=0 busy
  while busy=$(busy_percent); [ "$busy" -ge 20 ]; do
    if [ "$waited" -ge "$limit" ]; then
      echo "$name: the machine is still busy (${busy}% of a core used by other processes, load average $(cut -d' ' -f1-3 /proc/loadavg)); running anyway" | tee -a "$log"
      return
    fi
    echo "$name: waiting for a quiet machine (${busy}% of a core busy)..." >&2
    sleep 8; waited=$((waited + 10))
  done
  echo "$name: quiet (${busy}% of a core busy); load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$log" >&2
}
