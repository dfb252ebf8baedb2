#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
printf '#!/bin/bash\r\necho ok\r\n' > run.sh
