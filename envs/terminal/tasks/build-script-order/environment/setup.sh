#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
mkdir -p parts; echo header > parts/1.txt; echo body > parts/2.txt
cat > build.sh <<'EOF'
#!/bin/bash
set -e
# step: bundle the generated files
cat gen/*.txt > dist/bundle.txt
# step: make the output folders
mkdir -p gen dist
# step: generate (upper-case every part)
for f in parts/*.txt; do tr a-z A-Z < "$f" > "gen/$(basename "$f")"; done
echo built
EOF
chmod +x build.sh
