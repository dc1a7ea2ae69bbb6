#!/bin/sh
# A cron job that must not run twice at once, even when the crontab is
# installed on several hosts: `locksmith run` holds a lock while the job
# runs and exits with the job's status (75 if another host has it).
#
#   */5 * * * * LOCKSMITH_REDIS_URL=redis://redis.internal:6379 /opt/jobs/cron-job.sh
#
# LOCKSMITH (default: `locksmith` on the PATH) and the job itself can be
# overridden for testing.
set -eu
LOCKSMITH=${LOCKSMITH:-locksmith}
exec "$LOCKSMITH" run --lock "${JOB_LOCK:-cron:nightly-report}" --wait 0 --conflict-exit-code 75 -- \
    sh -c 'echo "report by $$ with token $LOCKSMITH_FENCING_TOKEN"; sleep "${JOB_SECONDS:-1}"'
