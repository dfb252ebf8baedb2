#!/bin/bash
set -e
cat > build.sh <<'EOF'
#!/bin/bash
set -e
mkdir -p gen dist
for f in parts/*.txt; do tr a-z A-Z < "$f" > "gen/$(basename "$f")"; done
cat gen/*.txt > dist/bundle.txt
echo built
EOF
./build.sh
