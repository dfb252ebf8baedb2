#!/bin/bash
# Runs in the sandbox's work dir before the episode.
set -e
mkdir -p notes; printf '1\n2\n3\n' > "notes/day one.txt"; printf 'a\nb\n' > notes/two.txt; printf 'x\n' > "notes/my  file.txt"; echo ignored > notes/skip.md
cat > count.sh <<'EOF'
#!/bin/bash
total=0
for f in $(ls $1/*.txt); do
  n=$(wc -l < $f)
  total=$((total + n))
done
echo $total
EOF
chmod +x count.sh
