#!/bin/bash
set -e
cat > build.sh <<'EOF'
#!/bin/bash
mkdir -p out
for s in src/*.txt; do
  t="out/$(basename "$s" .txt).up"
  if [ ! -e "$t" ] || [ "$s" -nt "$t" ]; then tr a-z A-Z < "$s" > "$t"; echo "$t"; fi
done
EOF
chmod +x build.sh
